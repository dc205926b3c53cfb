"""Effect against compute: every run at every budget point (evaluation.budgets), against the baseline there.

at_budget       the experiment's runs as they stood at one budget point (`ablate report --at-budget N`)
budget_table    BLEU ± sd and ΔBLEU [lo, hi] for each run and budget, with a verdict on each (ablate.report.decide)
rank_agreement  Kendall τ of the runs' order between budgets, beside τ between seeds at one budget
verdicts        a line a run: the effect holds, grows, shrinks, vanishes, flips, emerges, or is not resolved
reproduction    each budget point against a run trained to that budget alone elsewhere under the results root

A row's ΔBLEU interval is the comparison table's (ablate.report.significance: seeds and test sentences), at
the same budget for both arms. Torch is not imported.
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.errors import UserError
from ablate.record import BudgetPoint, StoppedBy
from ablate.report.decide import judge
from ablate.report.frame import BUDGET_UNITS, Comparison, compare, mean_of
from ablate.report.results import ExperimentResults, JobRecord, bleus
from ablate.report.significance import (
    ALPHA,
    POWER_NOTE,
    Interval,
    lacks_spread,
    no_spread_note,
    pooled_sd,
    seeds_for,
    t_ppf,
)
from ablate.report.verdicts import Declared
from ablate.rundir import (
    budget_dir,
    budget_name,
    config_hash,
    finished_jobs,
    read_hypotheses,
    read_result,
    seed_dirs,
)


def unit(exp: ExperimentResults) -> str | None:
    """The budget key (max_steps, ...) of the runs with budget points; None when no run has them."""
    for jobs in exp.runs.values():
        for job in jobs:
            if job.result.budget_points and len(job.result.budget or {}) == 1:
                return next(iter(job.result.budget))
    return None


def points_of(job: JobRecord, key: str | None) -> list[BudgetPoint]:
    """A job's budget points; a run without them has one, its end, when its length is counted in `key` alone."""
    if job.result.budget_points:
        return job.result.budget_points
    end = job.result.end_point(key) if key is not None else None
    return [] if end is None else [end]


def budgets(exp: ExperimentResults) -> list[float]:
    """The budget points any run of the experiment was scored at, in order (runs' ends among them)."""
    key = unit(exp)
    return sorted({float(p.budget) for jobs in exp.runs.values() for j in jobs for p in points_of(j, key)})


def at_budget(exp: ExperimentResults, budget: float) -> ExperimentResults:
    """Each job as a run of length `budget` would have ended: its scores, validation loss and hypotheses there.

    A run without budget points counts when its end is at `budget`: a 500-step run beside a run with a point at 500.
    """
    out = ExperimentResults(exp.name, exp.directory)
    key = unit(exp) or next((next(iter(j.result.budget)) for jobs in exp.runs.values() for j in jobs
                             if len(j.result.budget or {}) == 1), None)  # fmt: skip
    for run, jobs in exp.runs.items():
        for job in jobs:
            points = points_of(job, key)
            point = next((p for p in points if float(p.budget) == float(budget)), None)
            if point is None:
                continue
            directory = job.directory if point is points[-1] else budget_dir(job.directory, budget)
            out.runs.setdefault(run, []).append(JobRecord(directory, job.result.at(point, key), job.config))
    if not any(out.runs.values()):
        known = ", ".join(budget_name(b) for b in budgets(exp)) or "none: no run set evaluation.budgets"
        raise UserError(f"--at-budget {budget_name(budget)}: {exp.directory} has no run scored at that budget "
                        f"(budget points: {known})")  # fmt: skip
    return out


def with_ends(exp: ExperimentResults, budget: float) -> ExperimentResults | None:
    """The runs at `budget`, the cap, with those that early stopping ended before it counted at their end, as the
    comparison table counts them; None when no run stopped early before it."""
    view = at_budget(exp, budget)
    added = False
    for run, jobs in exp.runs.items():
        for job in jobs:
            limits = job.result.budget or {}
            at_cap = float(next(iter(limits.values()), -1)) == budget
            stopped = job.result.stopped_by == StoppedBy.EARLY_STOPPING and at_cap
            if stopped and job.ok and len(limits) == 1:
                view.runs.setdefault(run, []).append(JobRecord(job.directory, job.result, job.config))
                added = True
    return view if added else None


@dataclass
class Budgets:
    """The budget tables of one experiment."""

    points: list[float]
    unit: str  # what the budget points count: steps, tgt tokens, FLOPs
    frame: pd.DataFrame  # a row a run and budget
    notes: list[str]
    agreement: pd.DataFrame  # Kendall τ between budgets, and between seeds
    agreement_notes: list[str]
    verdicts: dict[str, str]  # run -> its line
    intervals: dict[tuple[str, float], Interval]


def budget_table(exp: ExperimentResults, declared: Declared | None = None) -> Budgets | None:
    """Every run at every budget point, with a verdict on each interval, each point judged as the comparison judges
    its rows (equivalent within the `declared` margin, else better or worse after Holm over that point's rows, else
    undecided); None when no run has more than one point."""
    margin = declared.design.margin if declared is not None else None
    points = budgets(exp)
    if unit(exp) is None or len(points) < 2:
        return None
    split = exp.split()
    rows, intervals, no_spread = [], {}, {}
    views = {b: at_budget(exp, b) for b in points}
    for b, view in views.items():
        spread = declared.spread if declared is not None else None
        comparison = compare(view, split, "bs", p_values=False, spread=spread) if split else Comparison()
        for run, jobs in view.runs.items():
            bleu = bleus(jobs, split)
            reference = bleus(view.runs.get(view.reference(run), []), split)
            interval = comparison.intervals.get(run)
            if interval is not None:
                intervals[(run, b)] = interval
            spread = pooled_sd(bleu, reference)
            if lacks_spread(interval, spread):
                no_spread.setdefault(run, []).append(budget_name(b))
            rows.append({
                "run": run, "budget": budget_name(b), "BLEU": mean_of(bleu),
                "BLEU std": round(statistics.stdev(bleu), 2) if len(bleu) > 1 else None, "n": len(bleu),
                # the comparison table's rule (frame._scores): the difference of the seeds' mean BLEUs, rounded once
                "ΔBLEU": None if interval is None or not bleu or not reference
                else round(statistics.fmean(bleu) - statistics.fmean(reference), 2) + 0.0,
                "ΔBLEU lo": None if interval is None else round(interval.low, 2),
                "ΔBLEU hi": None if interval is None else round(interval.high, 2),
                "verdict": None,
                "seeds for 80%": seeds_for(interval, spread),
                "valid loss": mean_of([loss for j in jobs if j.ok and (loss := j.result.valid_loss) is not None], 3),
            })  # fmt: skip
    order = list(exp.runs)
    rows.sort(key=lambda r: (order.index(r["run"]), float(r["budget"])))  # a run's points together, in order
    alpha = declared.design.alpha if declared is not None else ALPHA
    verdicts_of = {}  # each budget point one family, judged as the comparison judges its rows (its margin and α)
    for b in points:
        verdicts_of |= judge({k: i for k, i in intervals.items() if k[1] == b}, margin, alpha)
    for row in rows:
        key = next((k for k in intervals if k[0] == row["run"] and budget_name(k[1]) == row["budget"]), None)
        if key is not None:
            row["verdict"] = verdicts_of[key]
    frame = pd.DataFrame(rows, dtype=object)
    if frame["seeds for 80%"].isna().all():
        frame = frame.drop(columns="seeds for 80%")
    marked, n = sum(i.excludes_zero for i in intervals.values()), len(intervals)
    equivalent, judged, unmarked = (
        (f"equivalent where two one-sided tests reject |ΔBLEU| ≥ {margin:g} BLEU ({declared.margin_text()}), else ",
         "both kinds of test corrected together over that point's rows (Holm's step-down with Shaffer's sharpening",
         "")
        if margin is not None
        else ("", "Holm's correction over that point's rows (one test a row",
              "; no margin was declared, so nothing is called equivalent")
    )  # fmt: skip
    notes = [
        f"Each run at each budget point against the baseline at the same budget; BLEU on {split}. ΔBLEU [lo, hi] "
        "is the comparison table's 95% interval (seeds and test sentences); * marks an interval that excludes 0.",
        f"verdict: at each budget point as the comparison table judges its rows, and as `ablate report --at-budget "
        f"B` shows them: {equivalent}better or worse where the test of ΔBLEU = 0 rejects, else undecided, with "
        f"{judged}; family-wise error {alpha:.0%} at each point; p from the interval's t distribution){unmarked}. "
        "So the same runs at the same point read the same here, in the comparison and in the forest plot's panels.",
        f"Many rows, many chances: {n} intervals, so about {ALPHA * n:.1f} would exclude 0 by chance alone if no run "
        f"differed from the baseline; {marked} do. Each point is a family of its own, so over all {len(points)} "
        "points a false verdict somewhere is likelier than at one.",
    ]  # fmt: skip
    if "seeds for 80%" in frame.columns:
        notes.append(POWER_NOTE)
    if no_spread:
        notes.append(no_spread_note([f"{run} at {', '.join(at)}" for run, at in
                                     sorted(no_spread.items(), key=lambda item: order.index(item[0]))]))  # fmt: skip
    agreement, agreement_notes = rank_agreement(exp, views, split, with_ends(exp, points[-1]))
    deltas = {(row["run"], row["budget"]): row.get("ΔBLEU") for row in rows}  # the table's, rounded once
    verdict_lines = verdicts(exp, intervals, points, deltas)
    counted = BUDGET_UNITS.get(unit(exp) or "", "")
    return Budgets(points, counted, frame, notes, agreement, agreement_notes, verdict_lines, intervals)


def rank_agreement(exp: ExperimentResults, views: dict[float, ExperimentResults], split: str | None,
                   ended: ExperimentResults | None = None) -> tuple[pd.DataFrame, list[str]]:  # fmt: skip
    """Kendall τ of the runs' order between budgets (consecutive, and first against last), beside its noise ceiling.

    `ended`: the last budget with the runs that early stopping ended before it counted at their end (with_ends);
    each pair with the last budget then gets a second row beside the first, over those runs too.

    Two columns a row. `τ of means`: the runs ordered by their mean BLEU. `τ of single seeds`: the mean τ
    over every pair of different seeds, one seed's BLEU at one budget against another seed's at the other;
    on the rows `seeds at B` both are at B, and that is the ceiling, what two seeds agree on when nothing
    changed. Only the single-seed column is read against it: means rank more reliably than single seeds, so a
    τ of means below the ceiling can still be a real reordering. The same seed at two budgets is left out of
    the single-seed τ, since its two points share one training path and agree more than two seeds would.
    """
    from scipy.stats import kendalltau

    means = {b: {run: mean_of(bleus(jobs, split), 4) for run, jobs in v.runs.items()} for b, v in views.items()}
    seeds = {b: _by_seed(v, split) for b, v in views.items()}
    points = list(views)
    pairs = [*itertools.pairwise(points), *([(points[0], points[-1])] if len(points) > 2 else [])]
    last = points[-1]
    if ended is not None:
        means["ended"] = {run: mean_of(bleus(jobs, split), 4) for run, jobs in ended.runs.items()}
        seeds["ended"] = _by_seed(ended, split)
    rows = []
    for a, b in pairs:
        for end in (b, "ended") if b == last and ended is not None else (b,):
            runs = [r for r in means[a] if means[a][r] is not None and means[end].get(r) is not None]
            tau = kendalltau([means[a][r] for r in runs], [means[end][r] for r in runs]).statistic if len(
                runs) > 2 else None  # fmt: skip
            single, _ = _single_seed_tau(seeds[a], seeds[end], same_budget=False)
            name = f"{budget_name(a)} and {budget_name(b)}" + (", early-stopped runs at their end" if end == "ended"
                                                                 else "")  # fmt: skip
            rows.append({"between": name, "runs": len(runs),
                         "τ of means": None if tau is None or math.isnan(tau) else round(float(tau), 2),
                         "τ of single seeds": None if single is None else round(single, 2)})  # fmt: skip
    for b in points:
        tau, runs = _single_seed_tau(seeds[b], seeds[b], same_budget=True)
        if tau is not None:
            rows.append({"between": f"seeds at {budget_name(b)}", "runs": runs, "τ of means": None,
                         "τ of single seeds": round(tau, 2)})  # fmt: skip
    notes = [
        "Kendall τ between the runs' order at two budgets (1: the same order; 0: unrelated). τ of means orders "
        "the runs by their mean BLEU. τ of single seeds pairs one seed's BLEU at one budget with another "
        "seed's at the other (never the same seed twice), so it is read against the rows 'seeds at B', two "
        "seeds at one budget: the ceiling that seed noise leaves (Yang et al. 2020 measured 0.48 between two "
        "seeds of 32 architectures). A single-seed τ across budgets near that ceiling says the order is as "
        "stable as the noise lets one see; the τ of means is not comparable with it, as means rank better "
        "than single seeds. τ needs at least 3 runs; the single-seed columns need 2 seeds."
    ]
    if ended is not None:
        notes.append(f"early-stopped runs at their end: a run that early stopping ended before {budget_name(last)} "
                     "has no point there; this row counts it at its end, as the comparison table does, beside the "
                     "row without it.")  # fmt: skip
    return pd.DataFrame(rows, dtype=object), notes


def _by_seed(view: ExperimentResults, split: str | None) -> dict[int, dict[str, float]]:
    """seed -> run -> BLEU, for the runs that completed and scored `split`."""
    by_seed: dict[int, dict[str, float]] = {}
    for run, jobs in view.runs.items():
        for j in jobs:
            if j.ok and (bleu := j.result.bleu(split)) is not None:
                by_seed.setdefault(j.result.seed, {})[run] = bleu
    return by_seed


def _single_seed_tau(first: dict[int, dict[str, float]], second: dict[int, dict[str, float]],
                     same_budget: bool) -> tuple[float | None, int]:  # fmt: skip
    """The mean τ over pairs of different seeds s, t: s's BLEU in `first` against t's in `second`, over the
    runs both have; at one budget (`same_budget`) each unordered pair once. None without a pair of 3 runs."""
    from scipy.stats import kendalltau

    if same_budget:
        pairs = list(itertools.combinations(sorted(first), 2))
    else:
        pairs = [(s, t) for s in sorted(first) for t in sorted(second) if s != t]
    taus, sizes = [], []
    for s, t in pairs:
        runs = [r for r in first[s] if r in second[t]]
        if len(runs) > 2:
            tau = kendalltau([first[s][r] for r in runs], [second[t][r] for r in runs]).statistic
            if not math.isnan(tau):
                taus.append(float(tau))
                sizes.append(len(runs))
    return (statistics.fmean(taus), min(sizes)) if taus else (None, 0)


def verdicts(exp: ExperimentResults, intervals: dict[tuple[str, float], Interval], points: list[float],
             deltas: dict[tuple[str, str], float | None] | None = None) -> dict[str, str]:  # fmt: skip
    """A line a run, from its ΔBLEU interval at the first and at the last budget point; `deltas` (run, budget name):
    the table's ΔBLEU, shown in place of the interval's centre so that a figure reads the same everywhere."""
    deltas = deltas or {}
    out = {}
    first, last = points[0], points[-1]
    for run in exp.runs:
        a, b = intervals.get((run, first)), intervals.get((run, last))
        if a is None or b is None:
            continue
        said = verdict(a, b) if a.decidable and b.decidable else "not resolved (1 seed)"
        shown = [_show(i, deltas.get((run, budget_name(p)))) for i, p in ((a, first), (b, last))]
        line = f"{said}: {shown[0]} at {budget_name(first)}, {shown[1]} at {budget_name(last)}"
        if not (a.decidable and b.decidable):
            line += " (test sentences only: an arm has a single seed, so no claim about the architecture)"
        out[run] = line
    return out


def verdict(first: Interval, last: Interval) -> str:
    """What happened to an effect between two budgets, said only where the intervals support it.

    The change Δ_last - Δ_first is taken as resolved when it exceeds the half-widths of both intervals added
    in quadrature: the two budgets share seeds, so this treats them as independent and is conservative.
    """
    half = math.hypot((first.high - first.low) / 2, (last.high - last.low) / 2)
    change = last.delta - first.delta
    changed = abs(change) > half
    if first.excludes_zero and last.excludes_zero:
        if (first.delta > 0) != (last.delta > 0):
            return "flips"
        if not changed:
            return "holds"
        return "grows" if (change > 0) == (first.delta > 0) else "shrinks"
    if first.excludes_zero and changed:
        return "vanishes"
    if last.excludes_zero and changed:
        return "emerges"
    return "not resolved"


def _show(i: Interval, delta: float | None = None) -> str:
    """ΔBLEU [lo, hi], * where the interval excludes 0; `delta`: the table's ΔBLEU (else the interval's centre)."""
    sign = lambda v: f"{v:+.2f}".replace("-", "−")  # noqa: E731
    return f"{sign(i.delta if delta is None else delta)} [{sign(i.low)}, {sign(i.high)}]" + (
        "*" if i.excludes_zero else "")  # fmt: skip


def reproduction(exp: ExperimentResults, root: Path) -> tuple[pd.DataFrame, list[str]] | None:
    """Each budget point against a finished run under `root` trained to that budget alone, with the same spec and seed.

    On the same machine (CPU model and ISA, threads, precision) training is deterministic, so the hypotheses
    must be identical. Elsewhere a run diverges like another seed: its BLEU must lie within the 95% prediction
    interval of the other run's seeds, t(n-1)·sd·√(1 + 1/n) about their mean.
    """
    key = unit(exp)
    split = exp.split()
    if key is None or split is None:
        return None
    finished = finished_jobs(root)
    rows = []
    for run, jobs in exp.runs.items():
        for job in jobs:
            for point in job.result.budget_points or []:
                other = next((finished[h] for h in _alone_hashes(job, key, point.budget) if h in finished), None)
                if other is None or other == job.directory or split not in point.scores:
                    continue
                rows.append(_reproduced(run, job, point, other, split))
    if not rows:
        return None
    notes = [
        "Each budget point against a finished run trained to that budget alone, with the same spec and seed "
        "(found under the results root by its config hash; a spec that pins the precision also finds the "
        "same spec with `precision: auto`, whatever that resolved to). Same machine (CPU model and ISA, "
        "threads, precision, torch): training is deterministic, so the hypotheses must be identical. Another "
        "machine, another precision, or a GPU, whose kernels are not bit-deterministic: the run diverges like "
        "another seed, so its BLEU must lie within "
        "the 95% prediction interval of the other run's seeds. Each such row is judged at 95%, so about 1 row "
        "in 20 that does reproduce reads OUTSIDE by chance alone."
    ]
    return pd.DataFrame(rows, dtype=object), notes


def _alone_hashes(job: JobRecord, key: str, budget: float) -> list[str]:
    """The config hashes a run trained to `budget` alone would have: the job's spec with that length and no
    budget points; where the spec pins the precision, also the same spec with `precision: auto`, whatever that
    resolved to (where it became another precision, `_reproduced` judges the run by seed spread)."""
    alone = copy.deepcopy(job.config)
    alone["training"][key] = int(budget) if key == "max_steps" else budget
    alone.get("evaluation", {}).pop("budgets", None)
    hashes = [config_hash(alone)]
    if alone["training"].get("precision", "auto") != "auto":
        alone["training"]["precision"] = "auto"
        hashes.append(config_hash(alone))
    return hashes


def _reproduced(run: str, job: JobRecord, point: BudgetPoint, other: Path, split: str) -> dict[str, Any]:
    ours, theirs = job.result, read_result(other)
    bleu, their_bleu = point.bleu(split), theirs.bleu(split) if theirs else None
    # CPU kernels alone are deterministic, on one device name (model, ISA, threads), precision and torch
    same = theirs is not None and bool(ours.device) and ours.gpus == theirs.gpus == 0
    same = same and all(getattr(ours, k) == getattr(theirs, k) for k in ("device", "precision", "torch"))
    where = str(other.relative_to(other.parents[3]))  # <experiment>/runs/<run>/seed-<n>
    row = {"run": run, "seed": ours.seed, "budget": budget_name(point.budget),
           "trained alone as": where, "BLEU": bleu, "BLEU alone": their_bleu}  # fmt: skip
    if same:
        end = point is ours.budget_points[-1]  # the run's end: its hypotheses are the run's own
        mine = read_hypotheses(job.directory, split, None if end else point.budget)
        alone = read_hypotheses(other, split)
        differing = sum(a != b for a, b in zip(mine or [], alone or [], strict=False))
        verdict_text = "identical" if mine == alone and mine is not None else f"DIFFERENT: {differing} sentences"
        return row | {"machine": "same: exact", "verdict": verdict_text}
    their_seeds = [r for r in map(read_result, seed_dirs(other.parent)) if r and r.ok]
    seeds = [b for r in their_seeds if (b := r.bleu(split)) is not None]
    if len(seeds) < 2:
        return row | {"machine": "other", "verdict": "not judged: the other run has one seed, no spread"}
    n, mean, sd = len(seeds), statistics.fmean(seeds), statistics.stdev(seeds)
    half = float(t_ppf(0.975, n - 1)) * sd * math.sqrt(1 + 1 / n)
    inside = abs(bleu - mean) <= half
    return row | {"machine": "other: seed spread",
                  "verdict": f"{'within' if inside else 'OUTSIDE'} {mean:.2f} ± {half:.2f} ({n} seeds)"}  # fmt: skip
