"""What training's steps report: each step's Progress, the Outcome of a fit, the steps whose loss is still on the
device (Pending, read together in one wait) and what training has cost so far (Totals, kept in checkpoints)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ablate.record import Status, StoppedBy


@dataclass
class Progress:
    """What one optimizer step reports."""

    step: int
    epoch: int
    loss: float
    lr: float
    step_seconds: float
    src_tokens: int
    tgt_tokens: int


@dataclass
class Outcome:
    status: Status  # completed, diverged or interrupted
    steps: int
    epochs: float
    reason: str = ""
    stopped_by: StoppedBy | None = None  # completed: the budget limit reached first, or early stopping before it

    @property
    def stopped_early(self) -> bool:
        """Completed before the budget: the validation curve stopped improving."""
        return self.stopped_by == StoppedBy.EARLY_STOPPING


class Pending:
    """Steps whose loss is still on the device (training.sync_every): read together, in one wait for the device, then
    logged and checked for divergence each at its own step, as if each had been read at once. Their seconds are the
    time from the first one's start to the read, shared out evenly."""

    def __init__(self, on_step: Callable[[Progress], None] | None, diverge_loss: float):
        self.on_step, self.diverge_loss = on_step, diverge_loss
        self.steps: list[tuple[Progress, torch.Tensor, float]] = []
        self.began = 0.0

    def __len__(self) -> int:
        return len(self.steps)

    def begin(self) -> None:
        """A step starts: the clock starts when it is the first pending one."""
        if not self.steps:
            self.began = time.perf_counter()

    def add(self, progress: Progress, loss: torch.Tensor, epochs: float) -> None:
        self.steps.append((progress, loss, epochs))

    def read(self, totals: Totals, first: bool) -> Outcome | None:
        """Reads the pending losses (one wait for the device), counts their seconds in `totals` (not the process's
        first step's in the timed ones: it pays for warm-up), and logs them; the outcome of the first that diverged,
        if one did."""
        if not self.steps:
            return None
        losses = [self.steps[0][1].item()] if len(self.steps) == 1 else torch.stack([s[1] for s in self.steps]).tolist()
        seconds = time.perf_counter() - self.began
        each = seconds / len(self.steps)
        totals.step_seconds += seconds
        timed = len(self.steps) - (1 if first else 0)
        totals.timed_steps += timed
        totals.timed_seconds += each * timed
        steps, self.steps = self.steps, []
        for (progress, _, epochs), loss in zip(steps, losses, strict=True):
            progress.loss, progress.step_seconds = loss, each
            if self.on_step is not None:
                self.on_step(progress)
            if not math.isfinite(loss) or loss > self.diverge_loss:
                reason = f"training loss {loss:.4g} at step {progress.step}"
                return Outcome(Status.DIVERGED, progress.step, epochs, reason)
        return None


@dataclass
class Totals:
    """What training has cost so far, kept across restarts from a checkpoint."""

    src_tokens: int = 0
    tgt_tokens: int = 0
    step_seconds: float = 0.0  # optimizer steps alone; validation and checkpoints not counted
    timed_steps: int = 0  # steps in `timed_seconds`: all but the first of each process, which pays for warm-up
    timed_seconds: float = 0.0
    train_seconds: float = 0.0  # wall time of fit, validation included
    flops: float = 0.0  # training FLOPs, forward and backward (ablate.train.flops), every rank's shards
