"""Learning-rate schedules, registered by name: the paper's, and the ones a norm-placement ablation needs."""

from __future__ import annotations

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat

from ablate.registry import Part, PartParams, slot


class Schedule(Part):
    """Base: the learning rate at optimizer step `step` (counted from 1).

    `progress` is the fraction of the run's budget (steps, tokens, FLOPs or seconds: whichever ends it
    first) used before this step; schedules that need the run's length read it, the others ignore it.
    """

    def __init__(self, d_model: int):
        self.d_model = d_model

    def __call__(self, step: int, progress: float) -> float:
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

    def __call__(self, step: int, progress: float) -> float:
        if step < self.warmup:
            return self.lr * step / self.warmup
        return self.lr * (max(self.warmup, 1) / step) ** 0.5


@SCHEDULE.register("linear_warmup")
class LinearWarmup(Warmup):
    """Linear warmup to lr over `warmup` steps, then constant."""

    def __call__(self, step: int, progress: float) -> float:
        return self.lr * min(1.0, step / self.warmup) if self.warmup else self.lr


@SCHEDULE.register("constant")
class Constant(Schedule):
    """lr from the first step on, no warmup at all (where Post-LN is known to fail, Xiong et al. 2020)."""

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
