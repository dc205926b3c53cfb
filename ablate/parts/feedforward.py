"""The position-wise feed-forward network (§3.3)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ablate.registry import Part, slot


class FeedForward(Part, nn.Module):
    """Base: d_model -> d_ff -> d_model at every position; `dropout` acts on the hidden activations."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)


FEEDFORWARD = slot("feedforward", FeedForward, "the position-wise feed-forward network")


@FEEDFORWARD.register("relu")
class ReLUFeedForward(FeedForward):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, the paper's (§3.3)."""

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


@FEEDFORWARD.register("gelu")
class GELUFeedForward(FeedForward):
    """FFN(x) = GELU(x W1 + b1) W2 + b2 (Hendrycks & Gimpel 2016; BERT, GPT)."""

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.gelu(self.w_1(x))))


@FEEDFORWARD.register("swiglu")
class SwiGLUFeedForward(FeedForward):
    """FFN(x) = (Swish(x W1) * x V) W2, gated, no biases (Shazeer 2020); a third d_model x d_ff matrix."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__(d_model, d_ff, dropout)
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.v = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.silu(self.w_1(x)) * self.v(x)))
