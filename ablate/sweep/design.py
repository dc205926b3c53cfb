"""How an experiment's rows are judged, declared before anything trains: results/<experiment>/design.json.

The first `ablate run` writes it (atomically) from the experiment's `margin:`, --margin and, for a sequential
design, --until-decided's --max-seeds; every later run reads it. A plain design follows the latest margin and
seeds (rewritten when they change). A sequential design is fixed before its first look: another margin, seed
count or seed order for it is an error, since a design changed after seeing verdicts no longer keeps its
error rates. A plain run never replaces a sequential design. The report reads the
file (ablate.report.verdicts) and judges as the sweep did. No torch.
"""

from __future__ import annotations

from pathlib import Path

from ablate.errors import UserError
from ablate.record import DesignRecord
from ablate.report.verdicts import REFERENCE, design
from ablate.rundir import DESIGN, read_design, write_design
from ablate.sweep.experiment import Experiment


def first_seeds(experiment: Experiment, seeds: int | list[int] | None) -> list[int]:
    """The seeds every run starts with: --seeds (a number counts from the baseline's training.seed), else the
    experiment's `seeds:`, else the baseline's training.seed."""
    start = experiment.baseline.spec.training.seed
    if isinstance(seeds, int):
        return list(range(start, start + seeds))
    return list(seeds or experiment.seeds or [start])


def declare(
    experiment: Experiment,
    results: Path,
    seeds: int | list[int] | dict[str, list[int]] | None = None,
    margin: float | None = None,
    max_seeds: int | None = None,
) -> DesignRecord | None:
    """The experiment's design, written to design.json when it is new (atomically) and checked against the one
    there when not. A sequential design is fixed before its first look: another margin, seed count or seed
    order for it is an error. A plain run never replaces a sequential design; it declares a margin (its
    header's, or --margin) where there is one. `seeds` and `margin`: the flags; `max_seeds`: --until-decided's."""
    root = results / experiment.name
    path = root / DESIGN
    existing = read_design(root)
    margin = margin if margin is not None else experiment.margin
    first = first_seeds(experiment, seeds if not isinstance(seeds, dict) else None)
    if max_seeds is None:
        if margin is None or (existing is not None and existing.max_seeds is not None):
            return existing
        record = DesignRecord(margin=margin, seeds=first, first=len(first))
    else:
        if experiment.lr_sweep:
            raise UserError(f"{experiment.path}: --until-decided compares every run with the baseline; a learning-"
                            "rate sweep's rows have a baseline each (drop lr_sweep, or --lr-sweep)")  # fmt: skip
        if REFERENCE not in {run.name for run in experiment.runs}:
            raise UserError(f"{experiment.path}: --until-decided compares every run with a run named "
                            f"'{REFERENCE}', and it has none")  # fmt: skip
        extra = range(max(first) + 1, max(first) + 1 + max(max_seeds - len(first), 0))
        record = DesignRecord(margin=margin, seeds=[*first, *extra], first=len(first), max_seeds=max_seeds)
        try:
            design(record)
        except UserError as error:
            raise UserError(f"ablate run --until-decided: {experiment.path}: {error.lines[0]}") from None
        if existing is not None and existing.max_seeds is not None and existing != record:
            raise UserError(
                f"{path}: declares {_describe(existing)}; this command asks for {_describe(record)}. "
                "A sequential design is fixed before its first look (changed after seeing verdicts, "
                "its error rates would not hold): run it as declared, or into another --results"
            )
    if existing != record:
        write_design(root, record)
    return record


def _describe(record: DesignRecord) -> str:
    margin = f"margin {record.margin:g}" if record.margin is not None else "no margin"
    seeds = ",".join(map(str, record.seeds))
    if record.max_seeds is None:
        return f"{margin}, one look at seeds {seeds}"
    return f"{margin}, α {record.alpha:g}, {record.first} to {record.max_seeds} seeds ({seeds}), {record.spending}"
