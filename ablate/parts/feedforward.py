"""The position-wise feed-forward network (§3.3).

Each class here builds a part declared in ablate/parts/declared.py (what it is, its parameters, its checks).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ablate.parts import declared
from ablate.parts.declared import FEEDFORWARD


@FEEDFORWARD.builds
class FeedForward(declared.FeedForward, nn.Module):
    """Base: d_model -> d_ff -> d_model at every position; `dropout` acts on the hidden activations."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)


@FEEDFORWARD.register("relu")
class ReLUFeedForward(declared.ReLUFeedForward, FeedForward):
    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


@FEEDFORWARD.register("gelu")
class GELUFeedForward(declared.GELUFeedForward, FeedForward):
    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.gelu(self.w_1(x))))


@FEEDFORWARD.register("swiglu")
class SwiGLUFeedForward(declared.SwiGLUFeedForward, FeedForward):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__(d_model, d_ff, dropout)
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.v = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.silu(self.w_1(x)) * self.v(x)))
