"""Budget points (evaluation.budgets): one run decoded and scored at several lengths, each as a run of that length.

A schedule that does not depend on the run's length (inverse_sqrt, noam, constant, linear_warmup) makes the
model at step k a k-step run, so a budget point is the run where it reaches that budget: it is checkpointed,
evaluated exactly as at the end (the mean of the last checkpoints, the same beam and scores) and goes on.

Under wsd only the cooldown depends on the length, so a budget point b is a branch: where a b-long run would
start cooling down, at (1 - cooldown) * b, the trunk's whole state (weights, optimizer, RNG, data position) is
forked. The branch cools down to b in budgets/<b>/, with its own checkpoints, is evaluated and dropped, and
the trunk goes on at the constant rate from the state it forked. A kill during a branch resumes the branch.

The run's end is its last budget point, evaluated as any run's end. Each earlier point's record is
budgets/<b>/point.json (ablate.rundir), written once it is scored, so a resumed run never decodes it twice.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from ablate.data.batches import Example
from ablate.record import Branch, BudgetPoint, Cost, Evaluation, Points, Status, StoppedBy, Training, Validation
from ablate.rundir import (
    BUDGET_POINTS,
    CHECKPOINTS,
    POINT,
    budget_dir,
    last_checkpoint,
    read_point,
    write_point,
)
from ablate.train import checkpoints, distributed
from ablate.train.spec import TrainingSpec
from ablate.train.steps import Outcome, Progress
from ablate.train.trainer import Trainer

Evaluate = Callable[[Path, Path, int], tuple[Evaluation, Validation]]
"""(weights directory, output directory, step) -> the point's scores and validation, on rank 0: averaged, validated,
decoded."""
Save = Callable[[Path, Trainer, bool], None]
"""(directory, trainer, keep its weights for averaging) -> a checkpoint of the trainer there, on every rank."""
BranchLog = Callable[[Path, int | None], Callable[[Progress], None]]
"""(branch directory, step it resumes from) -> the branch's on_step, logging to its own metrics.jsonl."""


class BudgetPoints:
    """The budget points of one run: which are left, when each is due, and what is done there."""

    def __init__(self, points: Sequence[float] | None, spec: TrainingSpec, directory: Path, config_hash: str,
                 rank: int):  # fmt: skip
        self.unit = next(iter(spec.budgets())) if points else ""
        self.points = [int(b) if self.unit == "max_steps" else b for b in points or []]
        self.spec, self.directory, self.config_hash, self.rank = spec, directory, config_hash, rank
        # read once, so that every rank agrees on what is left whatever rank 0 writes meanwhile
        self.scored = {b for b in self.points[:-1] if (budget_dir(directory, b) / POINT).is_file()}
        if rank == 0:  # a kill between a branch's record and its clean-up leaves its checkpoints behind
            for b in self.scored:
                shutil.rmtree(budget_dir(directory, b) / CHECKPOINTS, ignore_errors=True)

    def forget(self) -> None:
        """A run that starts over drops the points of an earlier attempt (made, maybe, with another spec)."""
        if self.rank == 0:
            shutil.rmtree(self.directory / BUDGET_POINTS, ignore_errors=True)
        self.scored = set()

    def due(self, trainer: Trainer) -> list[float]:
        """The points to handle before the trainer's next update: reached (the trunk is the run), or whose
        cooldown starts with this update (wsd: the next update of a run of that length would cool down)."""
        if not self.points:
            return []
        used = trainer.used()[self.unit]
        cooldown = trainer.schedule.cooldown is not None
        due = (lambda b: trainer.schedule.cooling(used / b)) if cooldown else (lambda b: used >= b)
        return [b for b in self.points[:-1] if b not in self.scored and due(b)]

    def hook(self, trainer: Trainer, examples: Sequence[Example], save: Save | None, evaluate: Evaluate,
             branch_log: BranchLog, stop: Callable[[], bool] | None) -> Callable[[], bool]:  # fmt: skip
        """Trainer.fit's `before_update` for the trunk: evaluates or branches at each due point; True: stopped."""

        def before_update() -> bool:
            for b in self.due(trainer):
                if trainer.settle():  # every step before the point logged (and checked) before it is saved
                    return False
                with trainer.aside():
                    if trainer.schedule.cooldown is None:
                        self.at_trunk(b, trainer, save, evaluate)
                    elif self.branch(b, trainer, examples, save, evaluate, branch_log, stop):
                        return True
            return False

        return before_update

    def at_trunk(self, b: float, trainer: Trainer, save: Save | None, evaluate: Evaluate) -> None:
        """Evaluates the trunk itself at point b (checkpointed first, so a kill while decoding resumes here)."""
        if save is not None:
            save(self.directory, trainer, True)
        if self.rank == 0:
            weights = copy.deepcopy(trainer.model.state_dict())  # evaluation may load averaged weights
            record = self._record(b, trainer, Status.COMPLETED, *evaluate(self.directory, budget_dir(self.directory, b),
                                                                         trainer.step))  # fmt: skip
            trainer.model.load_state_dict(weights)
            if save is not None and not trainer.checkpoint_due():  # kept for this point alone
                # dropped before the point is recorded: a point evaluated again after a kill saves them again
                checkpoints.weights_path(self.directory, trainer.step).unlink(missing_ok=True)
            self._write(b, record)
        distributed.barrier()
        self.scored.add(b)

    def branch(self, b: float, trunk: Trainer, examples: Sequence[Example], save: Save | None, evaluate: Evaluate,
               branch_log: BranchLog, stop: Callable[[], bool] | None) -> bool:  # fmt: skip
        """Forks the trunk, cools the branch down to b, evaluates it, drops it and restores the trunk.

        Returns True when training was stopped inside the branch (its checkpoint holds where it stood).
        """
        here = budget_dir(self.directory, b)
        fork_step = trunk.step
        if save is not None:
            save(self.directory, trunk, False)  # the trunk at the fork: a kill inside the branch resumes here
        fork = copy.deepcopy(trunk.state_dict())
        branch = trunk.branch(self.spec.model_copy(update={self.unit: b}))
        found = last_checkpoint(here, self.config_hash) if save is not None else None
        resumed = None if found is None else found.step
        if found is not None:
            branch.load_state_dict(checkpoints.load_state(found, trunk.device))
            if self.rank == 0:
                checkpoints.forget_after(here, resumed)
        elif self.rank == 0:
            _fork_weights(self.directory, here, fork_step)
        distributed.barrier()
        on_step = branch_log(here, resumed)

        def on_checkpoint(step: int) -> None:
            assert save is not None
            save(here, branch, branch.checkpoint_due())

        outcome: Outcome = branch.fit(examples, on_step, None, on_checkpoint if save else None, stop)
        if outcome.status == Status.INTERRUPTED:
            return True
        if save is not None and outcome.status == Status.COMPLETED and resumed != outcome.steps:
            save(here, branch, True)  # the branch's end, averaged as a b-long run averages its end
        if self.rank == 0:
            scored = evaluate(here, here, branch.step) if outcome.status == Status.COMPLETED else ()
            record = self._record(b, branch, outcome.status, *scored)
            if outcome.status != Status.COMPLETED:
                record.error = outcome.reason
            record.branch = Branch(
                from_step=fork_step,
                steps=branch.step - fork_step,
                seconds=round(branch.totals.step_seconds - fork["totals"]["step_seconds"], 1),
            )
            self._write(b, record)
            shutil.rmtree(here / CHECKPOINTS, ignore_errors=True)  # evaluated and dropped
        distributed.barrier()
        trunk.load_state_dict(fork)
        self.scored.add(b)
        return False

    def _record(self, b: float, trainer: Trainer, status: Status, *scored: Evaluation | Validation) -> BudgetPoint:
        """Point b's record: where `trainer` stands, how it ended, and (when it was scored) its evaluation and
        validation."""
        totals = trainer.totals
        return BudgetPoint.of(*scored, budget=b, step=trainer.step, status=status,
                              epochs=round(trainer.epoch + trainer.epoch_fraction, 2),
                              train_target_tokens=totals.tgt_tokens, train_flops=totals.flops)  # fmt: skip

    def _write(self, b: float, record: BudgetPoint) -> None:
        write_point(self.directory, record)

    def summary(self, training: Training, cost: Cost, end: Evaluation) -> Points:
        """result.json's `budget_points` (every point's record, by budget, the run's end last: its `training`,
        `cost` and `end`'s evaluation) and what the cooldown branches cost. A run that early stopping ended never
        reached its last point, nor those after the step it stopped at: they are not there, and its end is no
        budget point."""
        earlier = [read_point(self.directory, b) for b in self.points[:-1]]
        records = [p for p in earlier if p is not None]
        if training.stopped_by != StoppedBy.EARLY_STOPPING:
            records.append(BudgetPoint.of(end, budget=self.points[-1], step=training.steps, status=Status.COMPLETED,
                                          epochs=training.epochs, train_target_tokens=cost.train_target_tokens,
                                          train_flops=cost.train_flops))  # fmt: skip
        summary = Points(budget_points=records)
        branches = [p.branch for p in records if p.branch is not None]
        if branches:
            summary.branch_steps = sum(b.steps for b in branches)
            summary.branch_seconds = round(sum(b.seconds for b in branches), 1)
        return summary


def _fork_weights(trunk: Path, branch: Path, step: int) -> None:
    """The branch starts with the trunk's weights kept for averaging up to the fork: a b-long run has them too."""
    shutil.rmtree(branch / CHECKPOINTS, ignore_errors=True)
    (branch / CHECKPOINTS).mkdir(parents=True)
    for kept in checkpoints.kept_steps(trunk):
        if kept <= step:
            shutil.copyfile(checkpoints.weights_path(trunk, kept), checkpoints.weights_path(branch, kept))
