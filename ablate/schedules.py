"""Learning-rate schedules, registered by name: the paper's, and the ones a norm-placement ablation needs."""

from __future__ import annotations

from pydantic import NonNegativeInt, PositiveFloat

from ablate.registry import Part, PartParams, slot


class Schedule(Part):
    """Base: the learning rate at optimizer step `step` (counted from 1)."""

    def __init__(self, d_model: int):
        self.d_model = d_model

    def __call__(self, step: int) -> float:
        raise NotImplementedError


SCHEDULE = slot("schedule", Schedule, "the learning rate at each step")


@SCHEDULE.register("noam")
class Noam(Schedule):
    """The paper's: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3)."""

    class Params(PartParams):
        warmup: NonNegativeInt = 4000
        factor: PositiveFloat = 1.0

    def __init__(self, d_model: int, warmup: int, factor: float):
        super().__init__(d_model)
        self.warmup, self.factor = warmup, factor

    def __call__(self, step: int) -> float:
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

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * step / self.warmup
        return self.lr * (max(self.warmup, 1) / step) ** 0.5


@SCHEDULE.register("linear_warmup")
class LinearWarmup(Warmup):
    """Linear warmup to lr over `warmup` steps, then constant."""

    def __call__(self, step: int) -> float:
        return self.lr * min(1.0, step / self.warmup) if self.warmup else self.lr


@SCHEDULE.register("constant")
class Constant(Schedule):
    """lr from the first step on, no warmup at all (where Post-LN is known to fail, Xiong et al. 2020)."""

    class Params(PartParams):
        lr: PositiveFloat = 5e-4

    def __init__(self, d_model: int, lr: float):
        super().__init__(d_model)
        self.lr = lr

    def __call__(self, step: int) -> float:
        return self.lr
