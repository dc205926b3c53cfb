"""Early stopping on the validation curve (training.early_stopping): fairseq's --patience, OpenNMT-py's early_stopping.

A run validates every `training.validate_every` steps. Each validation either improves on the best so far, by
more than `min_delta` in the metric's direction (valid_loss down, valid_bleu up), or does not; after
`patience` validations in a row that do not, training stops. `training.max_steps` (or another budget) stays
the cap: a run that reaches it was not stopped, and the record says which happened (ablate.record.RunResult:
`stopped_by`, and `early_stopping` with the metric, whether it stopped, the best step and value). The state
(best, its step, the count) is in the trainer's checkpoint, so a run killed and resumed stops where the
uninterrupted run stops.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveInt

from ablate.config import Section

METRICS = {"valid_loss": -1, "valid_bleu": +1}  # the direction of improvement


class EarlyStoppingSpec(Section):
    """When to stop before the budget: after `patience` validations without an improvement of `min_delta`."""

    metric: Literal["valid_loss", "valid_bleu"] = Field(
        "valid_loss", description="what improves: valid_loss (lower) or valid_bleu (higher; greedy, valid_bleu_pairs)"
    )
    patience: PositiveInt = Field(5, description="validations in a row without improvement before training stops")
    min_delta: NonNegativeFloat = Field(0.0, description="an improvement is a change of more than this")


@dataclass
class Watch:
    """The validation curve as early stopping sees it: the best value, its step, the validations since."""

    metric: str
    patience: int
    min_delta: float
    best: float | None = None
    best_step: int | None = None
    since_best: int = 0

    @classmethod
    def of(cls, spec: EarlyStoppingSpec) -> Watch:
        return cls(spec.metric, spec.patience, spec.min_delta)

    def see(self, step: int, value: float) -> bool:
        """One validation; True when it is the new best."""
        sign = METRICS[self.metric]
        if math.isfinite(value) and (self.best is None or sign * (value - self.best) > self.min_delta):
            self.best, self.best_step, self.since_best = value, step, 0
            return True
        self.since_best += 1
        return False

    @property
    def exhausted(self) -> bool:
        return self.since_best >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_step, self.since_best = state["best"], state["best_step"], state["since_best"]
