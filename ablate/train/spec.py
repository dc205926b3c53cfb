"""The run's spec: everything one run needs, assembled from the sections that live beside their code.

    model       ModelSpec       ablate.model.spec
    tokenizer   TokenizerSpec   ablate.data.tokenizer
    data        DataSpec        ablate.data.dataset
    training    TrainingSpec    ablate.train.trainer
    evaluation  EvaluationSpec  ablate.train.evaluation

Validated before, and without, any tensor; this module checks only what spans two sections.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from ablate.config import Section
from ablate.data.dataset import DataSpec
from ablate.data.tokenizer import TokenizerSpec
from ablate.errors import SpecValueError
from ablate.model.spec import ModelSpec
from ablate.train.evaluation import EvaluationSpec
from ablate.train.schedules import SCHEDULE
from ablate.train.trainer import POINT_BUDGETS, VALIDATIONS, TrainingSpec

__all__ = ["DataSpec", "EvaluationSpec", "ModelSpec", "RunSpec", "TokenizerSpec", "TrainingSpec"]


class RunSpec(Section):
    """Everything one run needs."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=lambda: TrainingSpec(max_steps=100_000))
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)

    def warnings(self) -> list[str]:
        """What is valid but cannot do what it says: `dotted.key: why`, one line each."""
        out = []
        training = self.training
        stopping, every, steps = training.early_stopping, training.validate_every, training.max_steps
        if stopping is not None and steps is not None and every != "epoch":
            validations = steps // every if every else VALIDATIONS
            if stopping.patience >= validations:
                out.append(f"training.early_stopping.patience: {stopping.patience} validations without improvement, "
                           f"but the run validates {validations} times in its {steps:,} steps, so early stopping "
                           "can never end it")  # fmt: skip
        return out

    @model_validator(mode="after")
    def _averaging(self) -> RunSpec:
        if self.evaluation.average_checkpoints > 1 and self.training.checkpoint_every is None:
            raise SpecValueError(
                f"averaging {self.evaluation.average_checkpoints} checkpoints needs training.checkpoint_every",
                ("evaluation", "average_checkpoints"),
            )
        return self

    @model_validator(mode="after")
    def _epoch_checkpoints(self) -> RunSpec:
        """Budget points are counted in steps, tokens or FLOPs; a pass's checkpoints are not among them."""
        if self.training.checkpoint_every == "epoch" and self.evaluation.budgets is not None:
            raise SpecValueError("checkpoints once an epoch cannot be scored at budget points: set "
                                 "training.checkpoint_every to a number of steps",
                                 ("training", "checkpoint_every"))  # fmt: skip
        return self

    @model_validator(mode="after")
    def _select_best(self) -> RunSpec:
        """The best weights are those of a validation step, kept: every validation is a checkpoint with weights."""
        if self.evaluation.select != "best":
            return self
        training, where = self.training, ("evaluation", "select")
        if training.early_stopping is None:
            raise SpecValueError("best needs training.early_stopping: its metric says which validation is best", where)
        every, validate = training.checkpoint_every, training.validate_every
        by_epoch = "epoch" in (every, validate)
        if every is None or validate is None or (every != validate if by_epoch else validate % every):
            raise SpecValueError(f"best needs training.validate_every ({validate}) to be a multiple of "
                                 f"training.checkpoint_every ({every}), so that every validation keeps its weights",
                                 where)  # fmt: skip
        if self.evaluation.budgets is not None and SCHEDULE.build(training.schedule, d_model=1).cooldown is not None:
            raise SpecValueError("best cannot score wsd's budget points: a cooldown branch does not validate", where)
        return self

    @model_validator(mode="after")
    def _joint_vocabulary(self) -> RunSpec:
        tying = self.model.tying
        if tying.cls.joint_vocabulary and not self.tokenizer.joint:
            raise SpecValueError(
                f"tying '{tying.name}' shares one matrix across languages and needs tokenizer.joint: true",
                ("model", "tying"),
            )
        return self

    @model_validator(mode="after")
    def _budget_points(self) -> RunSpec:
        """Budget points in the run's one reproducible unit, ending where it ends, on a schedule that allows them."""
        points = self.evaluation.budgets
        if points is None:
            return self
        where = ("evaluation", "budgets")
        limits = self.training.budgets()
        if len(limits) != 1 or next(iter(limits)) not in POINT_BUDGETS:
            raise SpecValueError(
                f"budget points need the run's length in exactly one of training.{', '.join(POINT_BUDGETS)}, "
                f"got {', '.join(f'training.{k}' for k in limits)}",
                where,
            )
        ((unit, end),) = limits.items()
        if unit == "max_steps" and any(p != int(p) for p in points):
            raise SpecValueError(f"steps are whole numbers, got [{', '.join(f'{p:g}' for p in points)}]", where)
        if points[-1] != end:
            raise SpecValueError(f"the last budget point ({points[-1]:g}) must be the run's end, training.{unit} "
                                 f"({end:g})", where)  # fmt: skip
        schedule = SCHEDULE.build(self.training.schedule, d_model=self.model.d_model)
        if schedule.uses_length and schedule.cooldown is None and len(points) > 1:
            raise SpecValueError(
                f"schedule '{self.training.schedule.name}' depends on the run's length, so a budget point is not "
                "the run of that length: use wsd, whose budget points are cooldown branches, or a schedule "
                "that does not (inverse_sqrt, noam, linear_warmup, constant)",
                where,
            )
        return self
