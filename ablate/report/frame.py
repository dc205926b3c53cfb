"""The comparison table: one row a run, with BLEU over seeds, ΔBLEU against the baseline and its interval,
speed and memory, and the notes that say what each figure covers.

Built from ablate.report.results' records, never from the model: torch is not imported.
ablate.report.tables renders it (terminal, md, csv, latex, html).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd

from ablate.errors import UserError, did_you_mean
from ablate.record import SpeedRecord, Status
from ablate.report.decide import UNDECIDED, Decision, Design
from ablate.report.results import ExperimentResults, JobRecord, SentenceStatistics, UnreadableReferencesError, bleus
from ablate.report.significance import POWER_NOTE, Interval, Spread, lacks_spread, no_spread_note, pooled_sd, seeds_for
from ablate.report.verdicts import Declared, fixed, sequential, verdict_note

COLUMNS = ["run", "differs", "params", "BLEU", "BLEU std", "n", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "CI over",
           "verdict", "decided at", "p", "seeds for 80%",
           "chrF", "len ratio", "valid loss", "valid ppl", "train tok/s", "tok/s vs baseline", "decode sent/s",
           "GFLOP/tgt tok", "train PFLOP", "TFLOP/s", "MFU", "budget", "steps", "stopped", "best step", "peak MiB",
           "wall s", "device", "GPUs",
           "GPU ids", "runs a GPU", "cores", "core share", "precision", "status", "note"]  # fmt: skip
HIGHER_IS_BETTER = {"BLEU", "ΔBLEU", "chrF", "train tok/s", "tok/s vs baseline", "decode sent/s", "n"}
T = TypeVar("T")


@dataclass
class Comparison:
    """How each run's BLEU compares with the baseline's on the test split."""

    p: dict[str, float] = field(default_factory=dict)  # sacreBLEU's paired test, seed-matched hypotheses
    intervals: dict[str, Interval] = field(default_factory=dict)  # ΔBLEU, seeds and sentences (significance.py)
    length_ratio: dict[str, float] = field(default_factory=dict)  # hypothesis over reference length, seeds' mean
    notes: list[str] = field(default_factory=list)


def compare(exp: ExperimentResults, split: str, test: str, p_values: bool = True,
            spread: Spread | None = None) -> Comparison:  # fmt: skip
    """Each run's length ratio, and its ΔBLEU interval and p-value against its reference (none with test "none";
    no p-value without `p_values`).

    All of them are built from each sentence's BLEU statistics, kept beside the hypotheses or counted from the test
    references (results.SentenceStatistics); for a job that has neither, a note names it.
    """
    from ablate.report.significance import delta_interval, length_ratio

    out = Comparison()

    def scored(jobs: list[JobRecord]) -> list[JobRecord]:
        return [j for j in jobs if j.ok and j.hypotheses(split) is not None]

    first = next((j for jobs in exp.runs.values() for j in scored(jobs)), None)
    if first is None:
        return out
    sentences = SentenceStatistics(first.config, split)
    try:
        sentences.of([j for jobs in exp.runs.values() for j in scored(jobs)])  # kept beside the hypotheses, or counted
    except UserError as error:
        hint = ""
        if isinstance(error, UnreadableReferencesError):
            download = "" if sentences.corpus == "files" else f", or run: ablate data download {sentences.corpus}"
            hint = f" (point ABLATE_DATA_DIR at the corpora{download})"
        out.notes.append(f"{'len ratio' if test == 'none' else 'len ratio, ΔBLEU intervals, p and verdicts'} not "
                         f"computed: {error.lines[0]}{hint}")  # fmt: skip
        return out
    score, stats = sentences.score, sentences.of

    for run, jobs in exp.runs.items():
        if done := scored(jobs):
            out.length_ratio[run] = round(float(length_ratio(stats(done)).mean()), 3)
    if test == "none":
        return out
    tests: dict[tuple, tuple[list[JobRecord], dict[str, list[JobRecord]]]] = {}  # (reference, seeds) -> its, runs'
    for run, jobs in exp.runs.items():
        reference = exp.reference(run)
        done, base = scored(jobs), scored(exp.runs.get(reference, []))
        if run == reference or not done or not base:
            continue
        out.intervals[run] = delta_interval(stats(base), stats(done), score, spread=spread)
        by_seed = {j.result.seed: j for j in base}
        paired = [j for j in done if j.result.seed in by_seed]
        if paired:
            key = (reference, *(j.result.seed for j in paired))
            tests.setdefault(key, ([by_seed[j.result.seed] for j in paired], {}))[1][run] = paired
    for base, systems in tests.values() if p_values else ():  # one per reference and set of seeds
        out.p |= _paired(base, systems, split, stats, test)
    return out


def _paired(base: list[JobRecord], systems: dict[str, list[JobRecord]], split: str, stats: Any, test: str
            ) -> dict[str, float]:  # fmt: skip
    """Each run's p against its reference (significance.paired_p), seed k against seed k, the seeds' sentences one
    after another; 1 where its hypotheses are the reference's."""
    from ablate.report.significance import paired_p

    def sentences(jobs: list[JobRecord]) -> Any:
        counted = stats(jobs)  # (seeds, N, K)
        return counted.reshape(-1, counted.shape[-1])

    def lines(jobs: list[JobRecord]) -> list[str]:
        return [h for j in jobs for h in j.hypotheses(split)]

    p = paired_p(sentences(base), {run: sentences(jobs) for run, jobs in systems.items()}, test)
    return {run: 1.0 if lines(systems[run]) == lines(base) else value for run, value in p.items()}


def mean_of(values: list[float], digits: int = 2) -> float | None:
    return round(statistics.fmean(values), digits) if values else None


def report_frame(exp: ExperimentResults, test: str = "bs", declared: Declared | None = None
                 ) -> tuple[pd.DataFrame, list[str]]:  # fmt: skip
    """One row a run (numbers for csv), and notes to print under the table; `declared`: the design its verdicts
    follow (ablate.report.verdicts; None: no margin, one look at α)."""
    split = exp.split()
    spread = declared.spread if declared is not None else None
    comparison = compare(exp, split, test, spread=spread) if split else Comparison()
    decisions, verdict_notes = _decisions(exp, split, comparison, declared)
    rows, no_spread = [], []
    benches = exp.benches()
    bench = benches[0] if benches else None
    for run, jobs in exp.runs.items():
        reference = exp.runs.get(exp.reference(run), [])
        spread = pooled_sd(bleus(jobs, split), bleus(reference, split))
        if lacks_spread(comparison.intervals.get(run), spread):
            no_spread.append(run)
        rows.append({"run": run, **_scores(jobs, reference, split, run == exp.reference(run)),
                     **_against(comparison, run, spread), **_verdict(decisions.get(run), declared),
                     **_costs(jobs, reference, bench), **_length(jobs), **_machine(jobs)})  # fmt: skip
    frame = _drop_empty(pd.DataFrame(rows, columns=COLUMNS, dtype=object), comparison, test)
    frame.attrs["benched"] = bench is not None  # its speed columns are the bench's: no busy-machine marks
    return frame, _notes(exp, split, comparison, test, rows, no_spread, benches) + verdict_notes


def _decisions(exp: ExperimentResults, split: str | None, comparison: Comparison, declared: Declared | None
               ) -> tuple[dict[str, Decision | str], list[str]]:  # fmt: skip
    """Each row's verdict (a Decision, or a word where a sequential design has not reached it) and its note."""
    if not comparison.intervals or split is None:
        return {}, []
    design = declared.design if declared is not None else Design()
    rows = len(comparison.intervals)
    references = sorted({exp.reference(run) for run in comparison.intervals})
    family = f"{exp.name}'s {rows} row{'s' if rows != 1 else ''} against {', '.join(references)}"
    if not design.sequential:
        return dict(fixed(comparison.intervals, design)), [verdict_note(declared, rows, family=family)]
    state = sequential(exp, declared, split)
    out: dict[str, Decision | str] = dict(state.decisions)
    for run in comparison.intervals:
        out.setdefault(run, f"pending: look {state.looks + 1} of {design.looks}")
    return out, [verdict_note(declared, rows, state, family)]


def _verdict(decision: Decision | str | None, declared: Declared | None) -> dict[str, Any]:
    if decision is None:
        return {"verdict": None, "decided at": None}
    if isinstance(decision, str):
        return {"verdict": UNDECIDED, "decided at": decision}
    if declared is None or not declared.design.sequential:
        borrowed = decision.interval is not None and decision.interval.borrowed is not None
        return {"verdict": f"{decision.verdict} (sd borrowed)" if borrowed else decision.verdict, "decided at": None}
    return {"verdict": decision.verdict,
            "decided at": f"look {decision.look + 1} of {declared.design.looks}: {decision.seeds} v "
                          f"{decision.reference_seeds} seeds, α {decision.alpha:.4f}"}  # fmt: skip


def _scores(jobs: list[JobRecord], reference: list[JobRecord], split: str | None, is_reference: bool) -> dict[str, Any]:
    """A run's scores over its seeds: BLEU and its difference from the reference run's, chrF, validation loss."""
    ok = [j.result for j in jobs if j.ok]
    bleu, base = bleus(jobs, split), bleus(reference, split)
    # the difference of the means, rounded once: the difference of rounded means can miss the interval's centre by
    # 0.01 (heads' 2 heads: 38.2967 - 38.5533 = -0.2567 read -0.25, where the interval says -0.26)
    delta = None if not bleu or not base or is_reference else round(statistics.fmean(bleu) - statistics.fmean(base), 2)
    return {
        "differs": jobs[0].result.describe, "params": jobs[0].result.params,
        "BLEU": mean_of(bleu), "BLEU std": round(statistics.stdev(bleu), 2) if len(bleu) > 1 else None,
        "n": len(bleu), "ΔBLEU": None if delta is None else delta + 0.0,  # + 0.0: -0.0 reads 0.0
        "chrF": mean_of([r.scores[split].chrf for r in ok if split in r.scores]),
        "valid loss": mean_of(_present(r.valid_loss for r in ok), 3),
        "valid ppl": mean_of(_present(r.valid_ppl for r in ok)),
    }  # fmt: skip


def _against(comparison: Comparison, run: str, spread: float | None) -> dict[str, Any]:
    """A run against its reference: the ΔBLEU interval, the p-value, the seeds to resolve it, the length ratio."""
    interval = comparison.intervals.get(run)
    return {"ΔBLEU lo": _rounded(interval, "low"), "ΔBLEU hi": _rounded(interval, "high"), "CI over": _covers(interval),
            "p": comparison.p.get(run), "seeds for 80%": seeds_for(interval, spread),
            "len ratio": comparison.length_ratio.get(run)}  # fmt: skip


def _costs(jobs: list[JobRecord], reference: list[JobRecord], bench: SpeedRecord | None) -> dict[str, Any]:
    """What a run cost: speed (against its reference's), FLOPs, its length limit, memory and wall time. With a
    bench (`ablate bench`), speed and memory are the bench's, measured side by side on one machine; without one,
    the training runs', and a ratio only between runs that trained in the same conditions (`_comparable`)."""
    results = [j.result for j in jobs]
    rate, base_rate = _speed(jobs), _speed(reference)
    paired = rate and base_rate and (jobs is reference or _comparable(jobs, reference))  # the baseline's own: 1
    out = {
        "train tok/s": rate, "tok/s vs baseline": round(rate / base_rate, 2) if paired else None,
        "decode sent/s": mean_of(_present(j.result.decode_sentences_per_s for j in jobs if j.ok), 1),
        "GFLOP/tgt tok": significant_mean([r.gflop_per_target_token for r in results]),
        "train PFLOP": significant_mean([r.train_flops / 1e15 for r in results if r.train_flops is not None]),
        "TFLOP/s": significant_mean([r.train_tflops_per_s for r in results]),
        "MFU": significant_mean([r.mfu for r in results]),
        "budget": ", ".join(dict.fromkeys(_budget(r.budget) for r in results if r.budget)) or None,
        "peak MiB": mean_of(_present(r.peak_memory_mib for r in results), 1),
        "wall s": mean_of(_present(r.wall_seconds for r in results), 1),
    }  # fmt: skip
    timed = bench.run(jobs[0].result.arm or jobs[0].result.run) if bench is not None and jobs else None  # any rate
    if bench is not None:  # a run the bench did not time has no speed rather than a training run's
        ratio = None if timed is None else (timed.ratio.estimate if timed.ratio else 1.0)
        out |= {"train tok/s": timed and round(timed.tokens_per_s), "tok/s vs baseline": ratio,
                "decode sent/s": timed and timed.beam_sentences_per_s, "TFLOP/s": timed and timed.tflops_per_s,
                "MFU": timed and timed.mfu, "peak MiB": timed and timed.peak_memory_mib}  # fmt: skip
    return out


def _conditions(jobs: list[JobRecord]) -> set[tuple[Any, ...]] | None:
    """Where and how a run's seeds trained: (device, runs sharing its GPU); None where a seed's cores were busy."""
    out = set()
    for job in jobs:
        r = job.result
        if r.core_share is not None and r.core_share < BUSY:
            return None
        out.add((r.device, r.runs_per_gpu or 1))
    return out


def _comparable(jobs: list[JobRecord], reference: list[JobRecord]) -> bool:
    """Whether a run's training speed may be divided by its reference's: every seed of both on one device, in the
    same conditions (one device name, threads included; no busy cores; a GPU of its own)."""
    mine, theirs = _conditions(jobs), _conditions(reference)
    return mine is not None and theirs is not None and len(mine | theirs) == 1 and (None, 1) not in mine


def _length(jobs: list[JobRecord]) -> dict[str, Any]:
    """Where early stopping could end a run (training.early_stopping): its seeds' mean steps, how many of them
    stopped before the cap, and their mean best validation step. None for a run trained to a fixed budget."""
    results = [j.result for j in jobs if j.ok and j.result.early_stopping is not None]
    if not results:
        return {"steps": None, "stopped": None, "best step": None}
    best = _present(r.early_stopping.best_step for r in results if r.early_stopping)
    return {"steps": round(statistics.fmean(r.steps or 0 for r in results)),
            "stopped": f"{sum(bool(r.early_stopping and r.early_stopping.stopped) for r in results)}/{len(results)}",
            "best step": round(statistics.fmean(best)) if best else None}  # fmt: skip


STOPPED_NOTE = (
    "stopped k/n: the seeds that early stopping ended (training.early_stopping: patience validations without an "
    "improvement) before the budget, which is a cap; the others reached the cap, which is not convergence. "
    "steps and best step are the seeds' means; BLEU is of the weights evaluation.select names (best: the "
    "checkpoints up to the best validation)."
)


def _speed(jobs: list[JobRecord]) -> float | None:
    """Training tokens a second, source and target, the mean over the seeds that measured it."""
    return mean_of(_present(j.result.train_tokens_per_s for j in jobs), 0)


def _machine(jobs: list[JobRecord]) -> dict[str, Any]:
    """Where a run's seeds trained and how they ended."""
    results = [j.result for j in jobs]
    return {
        "device": ", ".join(dict.fromkeys(_present(r.device for r in results))) or None,
        "GPUs": max((r.gpus or 0 for r in results), default=0),
        "GPU ids": " / ".join(",".join(map(str, r.gpu_ids)) for r in results if r.gpu_ids) or None,
        "runs a GPU": max(_present(r.runs_per_gpu for r in results), default=None),
        "cores": " / ".join(_cores(r.cpu_ids) for r in results if r.cpu_ids) or None,
        "core share": min(_present(r.core_share for r in results), default=None),
        "precision": ", ".join(dict.fromkeys(_present(r.precision for r in results))) or None,
        "status": _status([r.status for r in results]),
        "note": "; ".join(dict.fromkeys(r.note for r in results if r.note)) or None,
    }


def _present(values: Iterable[T | None]) -> list[T]:
    """The values a record holds: a field it lacks (an earlier ablate, a failed run) is None."""
    return [v for v in values if v is not None]


def _notes(exp: ExperimentResults, split: str | None, comparison: Comparison, test: str, rows: list[dict[str, Any]],
           no_spread: list[str], benches: list[SpeedRecord]) -> list[str]:  # fmt: skip
    """What the table's figures mean and cover: the scorer, the interval and the test, the machines."""
    notes = list(comparison.notes)
    if split:
        notes.insert(0, f"BLEU and chrF on {split}: {_signature(exp, split)}")
    notes += explanations(comparison, test)
    if any(row["seeds for 80%"] is not None for row in rows):
        notes.append(POWER_NOTE)
    if any(row["stopped"] is not None for row in rows):
        notes.append(STOPPED_NOTE)
    if no_spread:
        notes.append(no_spread_note(no_spread))
    if benches:
        return notes + bench_notes(benches)
    devices = dict.fromkeys(_present(j.result.device for jobs in exp.runs.values() for j in jobs))
    unpaired = [row["run"] for row in rows if row["tok/s vs baseline"] is None and row["train tok/s"] is not None]
    if unpaired:
        notes.append(f"tok/s vs baseline is – for {', '.join(unpaired)}: its seeds and the baseline's did not all "
                     "train on one device in the same conditions (one device, its cores or GPU to itself), so the "
                     "ratio would compare machines. `ablate bench FILE` times every run side by side on one "
                     "machine, and the report then takes speed and memory from it (docs/running.md).")  # fmt: skip
    if len(devices) > 1:
        notes.append(f"The runs trained on {len(devices)} different devices ({'; '.join(devices)}): train tok/s, "
                     "tok/s vs baseline, decode sent/s, TFLOP/s, MFU and wall s compare those as well as the "
                     "models.")  # fmt: skip
    shared = [row["run"] for row in rows if shared_gpu(row)]
    if shared:
        notes.append(
            f"† {', '.join(shared)}: its GPU could hold other runs of the sweep at the same time (ablate run "
            "--runs-per-gpu R, R in `runs a GPU`), so its train tok/s, tok/s vs baseline, decode sent/s, TFLOP/s, "
            "MFU and wall s may measure a shared GPU, not the run; compare speeds only between rows without †."
        )
    busy = [row["run"] for row in rows if row["core share"] is not None and row["core share"] < BUSY]
    if busy:
        notes.append(
            f"† {', '.join(busy)}: other processes ran on the run's cores (core share below {BUSY:.0%}, the "
            "lowest over its seeds), so its train tok/s, tok/s vs baseline, decode sent/s, TFLOP/s, MFU "
            "and wall s measure a busy machine, not the run; compare speeds only between rows without †."
        )
    return notes


def bench_notes(benches: list[SpeedRecord]) -> list[str]:
    """What the speed and memory columns are when a bench measured them, and every bench's ratios with their
    intervals."""
    first = benches[0]
    notes = [
        f"train tok/s, tok/s vs baseline, decode sent/s, TFLOP/s, MFU and peak MiB: `ablate bench` on {first.machine} "
        f"(torch {first.torch}, {first.started_at[:10]}), every run built here from its spec and seed and timed "
        f"side by side, {first.rounds} interleaved rounds of {first.runs[0].updates} training updates a run; "
        f"tok/s vs baseline is the geometric mean of round-paired ratios. decode sent/s: beam search of "
        f"{first.decode_sentences} sentences of {first.decode_split}, outputs {first.decode_lengths}; peak MiB: "
        + ("torch's max allocated." if first.device_type == "cuda" else "peak resident memory of a process that "
           "trains and decodes the run (torch and the corpus included).")
        + " wall s is what the training runs took where they trained."
    ]  # fmt: skip
    for bench in benches:
        ratios = "; ".join(f"{r.run} {r.ratio.estimate:.2f}× [{r.ratio.low:.2f}, {r.ratio.high:.2f}]"
                           for r in bench.runs if r.ratio is not None)  # fmt: skip
        reached = "" if bench.reached else f" (the ±{bench.target:.0%} aimed at was not reached in time)"
        notes.append(f"Training speed against the baseline on {bench.machine}, 95% intervals{reached}: {ratios}.")
    return notes


def _drop_empty(frame: pd.DataFrame, comparison: Comparison, test: str) -> pd.DataFrame:
    """The table without the columns no row has a value in, and those of comparisons not made."""
    for optional in ("note", "GPU ids", "runs a GPU", "cores", "core share", "GFLOP/tgt tok", "train PFLOP", "TFLOP/s",
                     "MFU", "budget", "steps", "stopped", "best step", "seeds for 80%", "decided at"):  # fmt: skip
        # a re-run after a spec change, GPUs handed out, results from before FLOPs were counted: else no column
        if frame[optional].isna().all():
            frame = frame.drop(columns=optional)
    if not comparison.length_ratio:
        frame = frame.drop(columns="len ratio")
    if not comparison.intervals:
        frame = frame.drop(columns=["ΔBLEU lo", "ΔBLEU hi", "CI over", "verdict"])
    if test == "none":
        frame = frame.drop(columns="p")
    return frame


BUSY = 0.9  # a run whose cores gave it less than this share of their time did not have them to itself


def shared_gpu(row: dict[str, Any]) -> bool:
    """A row some of whose seeds' GPU could hold other runs at once (--runs-per-gpu): its speed may not be its own.
    R is what the sweep allowed, not what happened (the last process of a resumed run says)."""
    return (row.get("runs a GPU") or 1) > 1


SPEED = ("train tok/s", "tok/s vs baseline", "decode sent/s", "TFLOP/s", "MFU", "wall s")  # what a busy machine skews


def _cores(ids: list[int]) -> str:
    """Core ids as ranges: [0, 1, 2, 5] -> `0-2,5`."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def significant_mean(values: list[float | None], digits: int = 3) -> float | None:
    """The mean to `digits` significant figures: FLOP figures span many orders of magnitude."""
    present = [v for v in values if v is not None]
    return float(f"{statistics.fmean(present):.{digits}g}") if present else None


BUDGET_UNITS = {"max_steps": "steps", "max_epochs": "epochs", "max_target_tokens": "tgt tokens",
                "max_flops": "FLOPs", "max_seconds": "s"}  # fmt: skip


def _budget(budget: dict[str, float]) -> str:
    """`1450 steps`, `2e+15 FLOPs`: what the run's length was set in (the first reached ends it)."""
    return " or ".join(f"{value:g} {BUDGET_UNITS.get(name, name)}" for name, value in budget.items())


def _rounded(interval: Interval | None, end: str) -> float | None:
    return None if interval is None else round(getattr(interval, end), 2)


def _covers(interval: Interval | None) -> str | None:
    if interval is None:
        return None
    if interval.borrowed is not None:
        return f"borrowed seed sd {interval.borrowed:.2f}, sentences"
    return "seeds, sentences" if interval.seeds else "sentences"


def explanations(comparison: Comparison, test: str) -> list[str]:
    """What the interval and the p-value mean, and what they leave out, in words a reviewer accepts."""
    notes = []
    if comparison.intervals:
        notes.append("ΔBLEU [lo, hi]: the run's mean BLEU over its seeds minus the baseline's, with a 95% confidence "
                     "interval that counts both seed-to-seed variance (Student's t over each arm's seeds) and "
                     "test-set sampling (paired bootstrap over sentences, 1,000 resamples), with Student's t at "
                     "Welch-Satterthwaite's degrees of freedom capped at 2·(seeds − 1) of the smaller arm, which "
                     "a simulation found to cover at least 94% from 2 seeds an arm up (docs/reports.md); * marks "
                     "an interval that excludes 0. It does not cover other corpora, other learning rates or longer "
                     "training.")  # fmt: skip
        if not all(i.seeds for i in comparison.intervals.values()):
            notes.append("CI over 'sentences': an arm has a single seed, so seed-to-seed variance is not covered "
                         "and the interval is too narrow for a claim about the architecture: such a row's verdict "
                         "is undecided (1 seed), whatever its interval; train more seeds (ablate run --seeds 3), or "
                         "declare a seed spread to borrow (seed_sd:, before the results).")  # fmt: skip
    if comparison.length_ratio:
        notes.append("len ratio: the length of the hypotheses over that of the references, in BLEU's tokens "
                     "(sacreBLEU's ratio), mean over seeds; below 1 BLEU's brevity penalty multiplies the score by "
                     "exp(1 - 1/ratio), 0.90 by 0.89.")  # fmt: skip
    if comparison.p:
        notes.append(f"p: sacreBLEU's paired {'bootstrap resampling' if test == 'bs' else 'approximate randomisation'}"
                     " against the baseline, seed-matched hypotheses concatenated: the chance of a difference this "
                     "large from test-set sampling alone; seed variance is not in it.")  # fmt: skip
    return notes


def _status(statuses: list[Status]) -> str:
    """`completed`, or `2 completed, 1 diverged` when the seeds of a run ended differently."""
    if len(set(statuses)) == 1:
        return str(statuses[0])
    return ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))


def _signature(exp: ExperimentResults, split: str) -> str:
    for jobs in exp.runs.values():
        for j in jobs:
            if j.ok and split in j.result.scores:
                return j.result.scores[split].bleu_signature
    return "?"


def select(frame: pd.DataFrame, columns: list[str] | None, sort: str | None, reverse: bool,
           optional: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """Chosen columns (run first), sorted on one; scores sort best first. `optional`'s columns join when named."""
    named = [*(columns or []), *([sort] if sort else [])]
    extra = [c for c in (optional.columns if optional is not None else []) if c != "run" and c not in frame.columns]
    for name in named:
        if name not in frame.columns and name not in extra:
            known = [*frame.columns, *extra]
            raise UserError(f"--columns/--sort: no column '{name}'{did_you_mean(name, known)} "
                            f"(columns: {', '.join(known)})")  # fmt: skip
    for name in dict.fromkeys(c for c in named if c in extra):
        values = dict(zip(optional["run"], optional[name], strict=True))
        frame = frame.assign(**{name: pd.Series([values.get(r) for r in frame["run"]], frame.index, dtype=object)})
    if sort:
        descending = (sort in HIGHER_IS_BETTER or (sort.startswith("BLEU ") and sort != "BLEU std")) != reverse
        records = frame.to_dict("records")
        present = sorted((r for r in records if r[sort] is not None), key=lambda r: r[sort], reverse=descending)
        missing = [r for r in records if r[sort] is None]  # diverged, failed: last either way
        frame = pd.DataFrame(present + missing, columns=frame.columns, dtype=object)
    if columns:
        frame = frame[list(dict.fromkeys(["run", *columns]))]
    return frame
