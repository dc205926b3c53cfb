"""How an experiment's rows are judged, declared before anything trains: results/<experiment>/design.json.

The first `ablate run` writes it (atomically) from the experiment's `margin:`, --margin and, for a sequential
design, --until-decided's --max-seeds; every later run reads it. The margin is fixed once any run of the
experiment has a result: another margin then, or a first one, is an error (a margin chosen after seeing the
intervals decides the verdicts it was meant to judge), and `ablate report --margin` is the way to look at
another, marked as a view. A plain design follows the latest seeds (rewritten when they change). A sequential
design is fixed before its first look: another margin, seed count or seed order for it is an error, since a
design changed after seeing verdicts no longer keeps its error rates. A plain run never replaces a sequential
design. The report reads the file (ablate.report.verdicts) and judges as the sweep did. This module computes no
tensor, but it is not torch-free: the experiment it reads (ablate.sweep.experiment) validates run specs, whose
sections import torch (ablate.train.spec).
"""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ablate.errors import UserError
from ablate.record import DesignRecord
from ablate.report.verdicts import REFERENCE, design
from ablate.rundir import DESIGN, has_results, is_experiment, read_design, write_design
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
    write: bool = True,
) -> DesignRecord | None:
    """The experiment's design, written to design.json when it is new (atomically; not with `write` False, as
    --dry-run) and checked against the one there when not. The margin is fixed once the experiment has a result
    (`_fixed_margin`). A sequential design is fixed before its first look: another margin, seed count or seed
    order for it is an error. A plain run never replaces a sequential design; it declares a margin (its
    header's, or --margin) where there is one. `seeds` and `margin`: the flags; `max_seeds`: --until-decided's."""
    root = results / experiment.name
    path = root / DESIGN
    existing = read_design(root)
    asked = margin if margin is not None else experiment.margin
    margin = _fixed_margin(experiment, root, existing, asked, "--margin" if margin is not None else "margin:")
    first = first_seeds(experiment, seeds if not isinstance(seeds, dict) else None)
    declared_at = existing.declared_at if existing is not None and existing.margin == margin else _now()
    spread = _spread(experiment, results, root, existing)
    if max_seeds is None:
        if (margin is None and not spread) or (existing is not None and existing.max_seeds is not None):
            return existing
        record = DesignRecord(margin=margin, seeds=first, first=len(first), declared_at=declared_at, **spread)
    else:
        if experiment.lr_sweep:
            raise UserError(f"{experiment.path}: --until-decided compares every run with the baseline; a learning-"
                            "rate sweep's rows have a baseline each (drop lr_sweep, or --lr-sweep)")  # fmt: skip
        if REFERENCE not in {run.name for run in experiment.runs}:
            raise UserError(f"{experiment.path}: --until-decided compares every run with a run named "
                            f"'{REFERENCE}', and it has none")  # fmt: skip
        extra = range(max(first) + 1, max(first) + 1 + max(max_seeds - len(first), 0))
        record = DesignRecord(margin=margin, seeds=[*first, *extra], first=len(first), max_seeds=max_seeds,
                              declared_at=declared_at)  # fmt: skip
        try:
            design(record)
        except UserError as error:
            raise UserError(f"ablate run --until-decided: {experiment.path}: {error.lines[0]}") from None
        if existing is not None and existing.max_seeds is not None and _same(existing, record) is False:
            raise UserError(
                f"{path}: declares {_describe(existing)}; this command asks for {_describe(record)}. "
                "A sequential design is fixed before its first look (changed after seeing verdicts, "
                "its error rates would not hold): run it as declared, or into another --results"
            )
        if existing is not None and existing.max_seeds is not None:
            record = existing
    if write and (existing is None or _same(existing, record) is False):
        write_design(root, record)
    return record


def _fixed_margin(experiment: Experiment, root: Path, existing: DesignRecord | None, asked: float | None,
                  flag: str) -> float | None:  # fmt: skip
    """The margin the design holds: the declared one once the experiment has a result (asking for another, or for
    a first one then, is an error naming both), else the one asked for."""
    declared = existing.margin if existing is not None else None
    if asked is None or asked == declared:
        return declared if declared is not None else asked
    if not has_results(root):
        return asked
    where = root / DESIGN
    if declared is None:
        raise UserError(f"{where}: {flag} {asked:g}: no margin was declared before {root} had results, and one "
                        "declared after them would be chosen by them; `ablate report --margin` shows the verdicts "
                        "at another margin as a view, or train into another --results")  # fmt: skip
    raise UserError(f"{where}: {flag} {asked:g}, but margin {declared:g} was declared"
                    f"{f' at {existing.declared_at}' if existing.declared_at else ''} and {root} has results: a "
                    "margin is fixed before the results; `ablate report --margin` shows another as a view")  # fmt: skip


def _spread(experiment: Experiment, results: Path, root: Path, existing: DesignRecord | None) -> dict[str, Any]:
    """design.json's seed_sd fields for the experiment's `seed_sd:` (a number, or pooled over another experiment's
    results when first declared), fixed like the margin once the experiment has results."""
    asked = experiment.seed_sd
    source = None if asked is None else "declared" if isinstance(asked, float | int) else asked.source
    had = existing.seed_sd_from if existing is not None else None
    if source == had and (source != "declared" or existing.seed_sd == asked):
        return {} if existing is None or had is None else {
            "seed_sd": existing.seed_sd, "seed_sd_df": existing.seed_sd_df, "seed_sd_from": had}  # fmt: skip
    if has_results(root):
        was = f"{existing.seed_sd:g} ({had})" if had else "none"
        raise UserError(f"{experiment.path}: seed_sd: the design ({root / DESIGN}) borrows {was}, and {root} has "
                        "results: a borrowed spread is fixed before the results, like the margin")  # fmt: skip
    if asked is None:
        return {}
    if source == "declared":
        return {"seed_sd": float(asked), "seed_sd_df": None, "seed_sd_from": "declared"}
    from ablate.report.results import bleus, load_results

    other = results / source
    if not is_experiment(other):
        raise UserError(f"{experiment.path}: seed_sd: from: no results of experiment '{source}' under {results}")
    exp = load_results(other)
    split = exp.split()
    parts = [(len(b) - 1, statistics.variance(b)) for jobs in exp.runs.values() if len(b := bleus(jobs, split)) > 1]
    if not parts:
        raise UserError(f"{experiment.path}: seed_sd: from: {other} has no run with 2 seeds or more to pool")
    df = sum(d for d, _ in parts)
    sd = math.sqrt(sum(d * v for d, v in parts) / df)
    return {"seed_sd": round(sd, 4), "seed_sd_df": float(df), "seed_sd_from": source}


def _same(a: DesignRecord, b: DesignRecord) -> bool:
    """Two designs alike but for when they were declared."""
    return a.model_dump(exclude={"declared_at"}) == b.model_dump(exclude={"declared_at"})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _describe(record: DesignRecord) -> str:
    margin = f"margin {record.margin:g}" if record.margin is not None else "no margin"
    seeds = ",".join(map(str, record.seeds))
    if record.max_seeds is None:
        return f"{margin}, one look at seeds {seeds}"
    return f"{margin}, α {record.alpha:g}, {record.first} to {record.max_seeds} seeds ({seeds}), {record.spending}"
