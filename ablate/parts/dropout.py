"""Dropout whose mask comes from 16 random bits an element (ModelSpec.dropout_sampler `bits16`).

torch's dropout on the CPU draws a Bernoulli sample an element from its Mersenne Twister, about 5 ns an
element: on 2 cores a base-recipe bf16 step spent an eighth of its time there (benchmarks/README.md).
`bits16` draws one 64-bit integer for four elements and compares each 16-bit quarter with a threshold, so an
element is dropped with probability p rounded to a multiple of 1/65536 (0.1 becomes 6554/65536 = 0.100006)
and the kept ones are scaled by 1/(1 - that p): the expectation is kept exactly. The same dropout, a
different random stream: a run with `bits16` is not the run with `bernoulli` sentence for sentence.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

LEVELS = 1 << 16  # the values of a 16-bit quarter of a draw


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """True where an element is kept: each with probability 1 - round(p·65536)/65536, independently."""
    n = shape.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), (1 << 63) - 1)
    quarters = draws.view(torch.int16)[:n]  # uniform over [-32768, 32767]; the draw's 2^-64 gap aside
    return (quarters >= -(LEVELS // 2) + dropped_levels(p)).view(shape)


def dropped_levels(p: float) -> int:
    """Of the 65536 values of 16 bits, how many drop an element."""
    return round(p * LEVELS)


class _MaskedScale(torch.autograd.Function):
    """x · keep / (1 - p): the gradient is masked and scaled the same way; only the boolean mask is saved."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


class Bits16Dropout(nn.Dropout):
    """nn.Dropout with its mask from 16 random bits an element (see the module's docstring)."""

    def forward(self, x: Tensor) -> Tensor:
        levels = dropped_levels(self.p)
        if not self.training or levels == 0:
            return x
        if levels == LEVELS:
            return x * 0.0
        keep = keep_mask(x.shape, self.p, x.device)
        return _MaskedScale.apply(x, keep, LEVELS / (LEVELS - levels))


SAMPLERS = ("bernoulli", "bits16")


def use_sampler(model: nn.Module, sampler: str) -> nn.Module:
    """Every nn.Dropout of `model` samples its mask with `sampler`: `bernoulli` (torch's, as built) or `bits16`."""
    if sampler not in SAMPLERS:
        raise ValueError(f"dropout sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
    if sampler == "bits16":
        for module in model.modules():
            for name, child in module.named_children():
                if type(child) is nn.Dropout:
                    setattr(module, name, Bits16Dropout(child.p, child.inplace))
    return model
