"""Learning-rate sensitivity: each run at its own best rate, and how much the rate matters to it.

After Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training instabilities"):
a run trained at every rate of `lr_sweep` is compared with the others across rates, not at the one rate
tuned for the baseline.

- best rate: the rate with the lowest final validation loss, the mean over seeds (chosen on the
  validation set, never on the test set whose BLEU the table reports);
- sensitivity: the mean over the swept rates of min(final loss, loss at initialisation) minus the
  best final loss. The cap keeps a diverged rate from counting more than a model that learned
  nothing; 0 means every rate did as well as the best.

Torch-free: it reads result files (ablate.report's records) only.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd

from ablate.record import Status
from ablate.report.frame import mean_of
from ablate.report.results import ExperimentResults, JobRecord, bleus

COLUMNS = ["run", "best lr", "BLEU at best lr", "n", "valid loss at best lr", "sensitivity", "rates", "diverged at"]


@dataclass
class Point:
    """One rate of one run: its seeds, and their final validation loss capped at the loss at initialisation."""

    lr: float
    jobs: list[JobRecord]

    def losses(self) -> list[float]:
        out = []
        for job in self.jobs:
            cap = job.result.init_valid_loss
            loss = job.result.valid_loss if job.ok else None
            if loss is None or not math.isfinite(loss):
                loss = cap  # diverged, or no loss: as bad as the untrained model
            if loss is not None and cap is not None:
                loss = min(loss, cap)
            if loss is not None:
                out.append(loss)
        return out

    def loss(self) -> float | None:
        losses = self.losses()
        return statistics.fmean(losses) if losses else None


def swept(exp: ExperimentResults) -> bool:
    return any(j.result.lr is not None for jobs in exp.runs.values() for j in jobs)


def arms(exp: ExperimentResults) -> dict[str, list[Point]]:
    """Each run before the sweep (the baseline first) -> its rates, in increasing order."""
    out: dict[str, dict[float, list[JobRecord]]] = {}
    for jobs in exp.runs.values():
        for job in jobs:
            if job.result.lr is not None:
                arm = out.setdefault(job.result.arm or job.result.run, {})
                arm.setdefault(float(job.result.lr), []).append(job)
    ordered = sorted(out, key=lambda a: (a != "baseline", list(out).index(a)))
    return {arm: [Point(lr, out[arm][lr]) for lr in sorted(out[arm])] for arm in ordered}


def best(points: list[Point]) -> Point | None:
    scored = [p for p in points if p.loss() is not None]
    return min(scored, key=lambda p: (p.loss(), p.lr)) if scored else None


def sensitivity(points: list[Point]) -> float | None:
    """Wortsman et al.'s: mean over rates of (capped final loss - best final loss)."""
    losses = [p.loss() for p in points]
    if not losses or any(loss is None for loss in losses):
        return None
    return statistics.fmean(losses) - min(losses)


def sensitivity_frame(exp: ExperimentResults) -> tuple[pd.DataFrame, list[str]]:
    """One row a run: its best rate, its BLEU there, its sensitivity, the rates at which a seed diverged."""
    split = exp.split()
    rows = []
    for arm, points in arms(exp).items():
        top = best(points)
        bleu = bleus(top.jobs if top else [], split)
        value = sensitivity(points)
        diverged = [f"{p.lr:g}" for p in points if any(j.result.status == Status.DIVERGED for j in p.jobs)]
        rows.append({
            "run": arm, "best lr": top.lr if top else None, "BLEU at best lr": mean_of(bleu), "n": len(bleu),
            "valid loss at best lr": round(top.loss(), 3) if top else None,
            "sensitivity": round(value, 3) if value is not None else None,
            "rates": ", ".join(f"{p.lr:g}" for p in points), "diverged at": ", ".join(diverged) or "-",
        })  # fmt: skip
    notes = [
        "best lr: the swept rate with the lowest final validation loss (mean over seeds), chosen on validation, "
        "not on the test set. sensitivity (Wortsman et al. 2023): the mean over the swept rates of the final "
        "validation loss, capped at the loss at initialisation, minus the best one, in nats a token; 0 means "
        "every rate did as well as the best. It covers only the rates swept: a best rate at the edge of the "
        "range may not be the best there is.",
    ]
    return pd.DataFrame(rows, columns=COLUMNS, dtype=object), notes


def at_best_lr(exp: ExperimentResults) -> ExperimentResults:
    """The experiment with each run at its own best rate, named as before the sweep (the baseline `baseline`)."""
    out = ExperimentResults(exp.name, exp.directory)
    for arm, points in arms(exp).items():
        top = best(points)
        if top is not None:
            out.runs[arm] = top.jobs
    return out
