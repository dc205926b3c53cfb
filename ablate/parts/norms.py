"""Layer normalisation: which norm, and where it sits around each residual sublayer.

Each class here builds a part declared in ablate/parts/declared.py (what it is, its parameters, its checks).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ablate.parts import declared
from ablate.parts.declared import NORM, NORM_PLACEMENT


@NORM.builds
class Norm(declared.Norm, nn.Module):
    """Base: normalises the last dimension, d_model."""

    def __init__(self, d_model: int):
        super().__init__()


@NORM.register("layernorm")
class LayerNorm(declared.LayerNorm, Norm):
    def __init__(self, d_model: int, eps: float):
        super().__init__(d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x)


@NORM.register("rmsnorm")
class RMSNorm(declared.RMSNorm, Norm):
    def __init__(self, d_model: int, eps: float):
        super().__init__(d_model)
        self.norm = nn.RMSNorm(d_model, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x)


@NORM_PLACEMENT.builds
class SublayerConnection(declared.SublayerConnection, nn.Module):
    """Base: a residual connection around one sublayer (attention or feed-forward), with its norm."""

    def __init__(self, norm: nn.Module, dropout: float):
        super().__init__()
        self.norm = norm
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        raise NotImplementedError


@NORM_PLACEMENT.register("post_ln")
class PostLN(declared.PostLN, SublayerConnection):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))


@NORM_PLACEMENT.register("pre_ln")
class PreLN(declared.PreLN, SublayerConnection):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


@NORM_PLACEMENT.register("post_ln_dropout_after_norm")
class PostLNDropoutAfterNorm(declared.PostLNDropoutAfterNorm, SublayerConnection):
    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.dropout(self.norm(x + sublayer(x)))
