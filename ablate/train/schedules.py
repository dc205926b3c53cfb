"""Learning-rate schedules, registered by name: the paper's, and the ones a norm-placement ablation needs."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat

from ablate.registry import Part, PartParams, slot


class Schedule(Part):
    """Base: the learning rate at optimizer step `step` (counted from 1).

    `progress` is the fraction of the run's budget (steps, tokens, FLOPs or seconds: whichever ends it
    first) used before this step; schedules that need the run's length read it, the others ignore it.

    `uses_length` says whether the rate depends on `progress` anywhere. Where it does not, a run's model at
    step k is a k-step run, so budget points (evaluation.budgets) are points of one run. A plugin schedule
    is taken to depend on the length until it says otherwise. `cooldown` is set by schedules whose rate
    depends on the length only over that last fraction of the run (wsd): their budget points are branches.
    """

    uses_length: ClassVar[bool] = True
    cooldown: float | None = None

    def __init__(self, d_model: int):
        self.d_model = d_model

    def cooling(self, progress: float) -> bool:
        """Whether a step at `progress` is in the cooldown (never, for a schedule without one)."""
        return self.cooldown is not None and progress >= 1.0 - self.cooldown

    def __call__(self, step: int, progress: float) -> float:
        raise NotImplementedError


SCHEDULE = slot("schedule", Schedule, "the learning rate at each step")


@SCHEDULE.register("noam")
class Noam(Schedule):
    """The paper's: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3)."""

    uses_length = False

    class Params(PartParams):
        warmup: NonNegativeInt = 4000
        factor: PositiveFloat = 1.0

    def __init__(self, d_model: int, warmup: int, factor: float):
        super().__init__(d_model)
        self.warmup, self.factor = warmup, factor

    def __call__(self, step: int, progress: float) -> float:
        ramp = step * self.warmup**-1.5 if self.warmup else float("inf")
        return self.factor * self.d_model**-0.5 * min(step**-0.5, ramp)


class WarmupParams(PartParams):
    lr: PositiveFloat = 5e-4
    warmup: NonNegativeInt = 4000


class Warmup(Schedule):
    """Shared by the schedules that ramp linearly to a peak `lr` over `warmup` steps."""

    Params = WarmupParams

    def __init__(self, d_model: int, lr: float, warmup: int):
        super().__init__(d_model)
        self.lr, self.warmup = lr, warmup


@SCHEDULE.register("inverse_sqrt")
class InverseSqrt(Warmup):
    """Linear warmup to lr, then lr * sqrt(warmup / step) (fairseq's inverse_sqrt)."""

    uses_length = False

    def __call__(self, step: int, progress: float) -> float:
        if step < self.warmup:
            return self.lr * step / self.warmup
        return self.lr * (max(self.warmup, 1) / step) ** 0.5


@SCHEDULE.register("linear_warmup")
class LinearWarmup(Warmup):
    """Linear warmup to lr over `warmup` steps, then constant."""

    uses_length = False

    def __call__(self, step: int, progress: float) -> float:
        return self.lr * min(1.0, step / self.warmup) if self.warmup else self.lr


@SCHEDULE.register("constant")
class Constant(Schedule):
    """lr from the first step on, no warmup at all (where Post-LN is known to fail, Xiong et al. 2020)."""

    uses_length = False

    class Params(PartParams):
        lr: PositiveFloat = 5e-4

    def __init__(self, d_model: int, lr: float):
        super().__init__(d_model)
        self.lr = lr

    def __call__(self, step: int, progress: float) -> float:
        return self.lr


@SCHEDULE.register("linear_decay")
class LinearDecay(Warmup):
    """Linear warmup to lr over `warmup` steps, then linear decay to final * lr at the end of the budget."""

    class Params(WarmupParams):
        final: NonNegativeFloat = 0.0

    def __init__(self, d_model: int, lr: float, warmup: int, final: float):
        super().__init__(d_model, lr, warmup)
        self.final = final

    def __call__(self, step: int, progress: float) -> float:
        if step < self.warmup:
            return self.lr * step / self.warmup
        return self.lr * (1 - (1 - self.final) * min(max(progress, 0.0), 1.0))


@SCHEDULE.register("wsd")
class WarmupStableDecay(Warmup):
    """Warmup-stable-decay (Hägele et al. 2024; MiniCPM): linear warmup to lr, lr held, then a cooldown over the
    last `cooldown` fraction of the run to final * lr, shaped 1-sqrt (their best) or linear.

    Only the cooldown depends on the run's length, so every shorter budget is a branch: the constant-rate
    trunk forked at (1 - cooldown) * budget and cooled down from there (ablate.train.budgets).
    """

    class Params(WarmupParams):
        cooldown: float = Field(0.2, gt=0.0, le=1.0, description="the fraction of the run cooled down (10-20%)")
        shape: Literal["1-sqrt", "linear"] = "1-sqrt"
        final: NonNegativeFloat = 0.0

    def __init__(self, d_model: int, lr: float, warmup: int, cooldown: float, shape: str, final: float):
        super().__init__(d_model, lr, warmup)
        self.cooldown, self.shape, self.final = cooldown, shape, final

    def __call__(self, step: int, progress: float) -> float:
        if step < self.warmup:
            return self.lr * step / self.warmup
        if not self.cooling(progress):
            return self.lr
        t = min((progress - (1.0 - self.cooldown)) / self.cooldown, 1.0)  # 0 at the cooldown's start, 1 at the end
        left = 1.0 - math.sqrt(t) if self.shape == "1-sqrt" else 1.0 - t
        return self.lr * (self.final + (1.0 - self.final) * left)
