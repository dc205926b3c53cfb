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
from ablate.train.trainer import TrainingSpec

__all__ = ["DataSpec", "EvaluationSpec", "ModelSpec", "RunSpec", "TokenizerSpec", "TrainingSpec"]


class RunSpec(Section):
    """Everything one run needs."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=lambda: TrainingSpec(max_steps=100_000))
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)

    @model_validator(mode="after")
    def _averaging(self) -> RunSpec:
        if self.evaluation.average_checkpoints > 1 and self.training.checkpoint_every is None:
            raise SpecValueError(
                f"averaging {self.evaluation.average_checkpoints} checkpoints needs training.checkpoint_every",
                ("evaluation", "average_checkpoints"),
            )
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
