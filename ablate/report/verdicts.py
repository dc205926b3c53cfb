"""An experiment's verdicts, from its result files: the design it declared (design.json, or the report's
`--margin`), each row's ΔBLEU interval at the seeds a look had, and what ablate.report.decide makes of them.
No torch.

The sweep's `--until-decided` (ablate.sweep.sequential) and the report read verdicts through this module alone,
so a table shows the decisions the sweep acted on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import UserError
from ablate.record import DesignRecord, Status
from ablate.report.decide import Decision, Design, Replay, judge, replay
from ablate.report.results import ExperimentResults, JobRecord, SentenceStatistics
from ablate.report.significance import Interval, Spread, delta_interval
from ablate.rundir import read_design

REFERENCE = "baseline"


@dataclass(frozen=True)
class Declared:
    """A design and the seeds in the order runs take them; `source` says where its margin came from."""

    design: Design
    seeds: list[int]
    source: str
    spread: Spread | None = None  # a seed sd borrowed for arms of one seed (the experiment's seed_sd:)

    def describe(self) -> str:
        return f"{self.design.describe()} ({self.source})"

    def margin_text(self) -> str:
        """The margin as every table states it: `margin 1 (declared in …)`, or `margin 3 (a view; declared: 1)`."""
        margin = self.design.margin
        return f"margin {margin:g} ({self.source})" if margin is not None else f"no margin ({self.source})"


def design(record: DesignRecord) -> Design:
    return Design(record.margin, record.alpha, record.first, record.max_seeds, record.spending)


def declared(directory: Path, margin: float | None = None) -> Declared | None:
    """The experiment's design.json, with `margin` (the report's --margin) over its margin; None when neither."""
    record = read_design(directory)
    if record is None:
        return None if margin is None else Declared(Design(margin), [], "a view; declared: none")
    spread = None
    if record.seed_sd is not None:
        spread = Spread(record.seed_sd, record.seed_sd_df if record.seed_sd_df is not None else math.inf,
                        record.seed_sd_from or "declared")  # fmt: skip
    if margin is None or margin == record.margin:
        when = f" at {record.declared_at}" if record.declared_at else ""
        return Declared(design(record), record.seeds, f"declared in {directory / 'design.json'}{when}", spread)
    return Declared(design(record.model_copy(update={"margin": margin})), record.seeds,
                    f"a view; declared: {f'{record.margin:g}' if record.margin is not None else 'none'}",
                    spread)  # fmt: skip


def finished_seeds(jobs: list[JobRecord], order: list[int]) -> int:
    """How many of a run's first seeds, in `order`, have finished (completed or diverged)."""
    done = {j.result.seed for j in jobs if j.result.status in (Status.COMPLETED, Status.DIVERGED)}
    count = 0
    for seed in order:
        if seed not in done:
            break
        count += 1
    return count


def sequential(exp: ExperimentResults, declared_: Declared, split: str) -> Replay:
    """Every look of a sequential design that the finished seeds allow. Raises UserError for a seed whose BLEU
    statistics are neither kept beside its hypotheses nor countable from the test references."""
    order = declared_.seeds
    rows = [run for run in exp.runs if run != REFERENCE]
    have = {run: finished_seeds(jobs, order) for run, jobs in exp.runs.items()}
    first = next((j for jobs in exp.runs.values() for j in jobs if j.ok), None)
    if first is None:
        return replay(declared_.design, rows, REFERENCE, have, lambda row, n, m: None)
    sentences = SentenceStatistics(first.config, split)

    def seeds_of(run: str, n: int) -> list[JobRecord] | None:
        by_seed = {j.result.seed: j for j in exp.runs.get(run, [])}
        jobs = [by_seed.get(seed) for seed in order[:n]]
        return jobs if all(j is not None and j.ok and j.hypotheses(split) is not None for j in jobs) else None

    def interval_of(row: str, n: int, m: int) -> Interval | None:
        system, base = seeds_of(row, n), seeds_of(REFERENCE, m)
        if system is None or base is None:
            return None
        return delta_interval(sentences.of(base), sentences.of(system), sentences.score)

    return replay(declared_.design, rows, REFERENCE, have, interval_of)


def fixed(intervals: dict[str, Interval], design_: Design) -> dict[str, Decision]:
    """One look at every row's interval, with all its seeds (the report's comparison intervals)."""
    verdicts = judge(intervals, design_.margin, design_.alpha)
    return {row: Decision(verdict, 0, design_.alpha, 0, 0, intervals[row]) for row, verdict in verdicts.items()}


def check_sequential(exp: ExperimentResults) -> None:
    """A sequential design compares every run with the baseline: not a learning-rate sweep."""
    if any(j.result.lr is not None for jobs in exp.runs.values() for j in jobs):
        raise UserError(f"{exp.directory}: --until-decided compares every run with the baseline; a learning-rate "
                        "sweep's rows have a baseline each")  # fmt: skip


def verdict_note(declared_: Declared | None, rows: int, state: Replay | None = None, family: str = "") -> str:
    """What the verdict column means under this design, with its margin and where the margin came from; `family`:
    which rows were corrected together (another table of the same runs may correct over other rows)."""
    d = declared_.design if declared_ is not None else Design()
    together = (f"both kinds of test corrected together over the {rows} row{'s' if rows != 1 else ''} (Holm's "
                "step-down with Shaffer's sharpening), so that the chance of any false verdict in the table is at "
                f"most α {d.alpha:g}")  # fmt: skip
    if d.margin is None:
        text = (f"verdict: better or worse where the test of ΔBLEU = 0 rejects after Holm's correction over the "
                f"{rows} row{'s' if rows != 1 else ''} (family-wise α {d.alpha:g}), else undecided. No margin was "
                "declared, so no row can be called equivalent: declare `margin:` in the experiment file, before "
                "looking, or pass --margin.")  # fmt: skip
    else:
        text = (f"verdict: equivalent where two one-sided tests reject |ΔBLEU| ≥ {d.margin:g} BLEU, else better or "
                f"worse where the test of ΔBLEU = 0 rejects, else undecided; {together}; "
                f"{declared_.margin_text()}.")  # fmt: skip
    if family:
        text += (f" The family: {family}; the same pair of runs in another experiment's table is corrected over "
                 "that table's rows, against its baseline's seeds, and can read otherwise.")  # fmt: skip
    spread = declared_.spread if declared_ is not None else None
    if spread is None:
        text += (" A row with one seed in an arm reads undecided (1 seed): its interval covers test sentences "
                 "alone, and no verdict about the architecture is drawn from it.")  # fmt: skip
    else:
        text += (f" A row with one seed in an arm borrows the experiment's declared seed spread ({spread.describe()})"
                 ": its interval counts that sd for both arms' means, and its verdict is marked (sd borrowed); if "
                 "the true spread is larger, such verdicts err more often than α (docs/reports.md).")  # fmt: skip
    if d.sequential:
        levels = ", ".join(f"{d.alpha_at(k):.4f}" for k in range(d.looks))
        text += (f" Sequential (ablate run --until-decided): every run started with {d.first} seeds and each "
                 f"undecided row got one more a look, up to {d.max_seeds}; looks 1 to {d.looks} test at α {levels} "
                 f"({d.spending} spending), which sum to {d.alpha:g}, so false decisions over all the looks stay at "
                 "most α (docs/reports.md). decided at: the look, the row's and the baseline's seeds then, and the "
                 "look's level.")  # fmt: skip
        if state is not None and not state.done:
            text += f" Not finished: {state.looks} of {d.looks} looks taken; the same ablate run goes on."
    return text
