"""Layer normalisation: which norm, and where it sits around each residual sublayer."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import PositiveFloat
from torch import Tensor, nn

from ablate.registry import Part, PartParams, slot


class Norm(Part, nn.Module):
    """Base: normalises the last dimension, d_model."""

    def __init__(self, d_model: int):
        super().__init__()


NORM = slot("norm", Norm, "the normalisation layer")


class EpsParams(PartParams):
    eps: PositiveFloat = 1e-5


@NORM.register("layernorm")
class LayerNorm(Norm):
    """LayerNorm: subtract the mean, divide by the standard deviation, then a learned gain and bias (Ba et al. 2016)."""

    Params = EpsParams

    def __init__(self, d_model: int, eps: float):
        super().__init__(d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x)


@NORM.register("rmsnorm")
class RMSNorm(Norm):
    """RMSNorm: divide by the root mean square, then a learned gain; no centring, no bias (Zhang & Sennrich 2019)."""

    Params = EpsParams

    def __init__(self, d_model: int, eps: float):
        super().__init__(d_model)
        self.norm = nn.RMSNorm(d_model, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x)


class SublayerConnection(Part, nn.Module):
    """Base: a residual connection around one sublayer (attention or feed-forward), with its norm."""

    final_norm: bool = False  # whether the stack of such layers ends with a norm of its own

    def __init__(self, norm: nn.Module, dropout: float):
        super().__init__()
        self.norm = norm
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        raise NotImplementedError


NORM_PLACEMENT = slot("norm_placement", SublayerConnection, "where the norm sits around each residual sublayer")


@NORM_PLACEMENT.register("post_ln")
class PostLN(SublayerConnection):
    """Post-LN, the paper's: x = LN(x + Dropout(Sublayer(x))), no final norm (§3.1, §5.4)."""

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))


@NORM_PLACEMENT.register("pre_ln")
class PreLN(SublayerConnection):
    """Pre-LN: x = x + Dropout(Sublayer(LN(x))), and a final norm on the stack's output (Xiong et al. 2020)."""

    final_norm = True

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


@NORM_PLACEMENT.register("post_ln_dropout_after_norm")
class PostLNDropoutAfterNorm(SublayerConnection):
    """The tutorial bug: x = Dropout(LN(x + Sublayer(x))), no final norm; the paper drops the sublayer's output
    before the residual sum and the norm, x = LN(x + Dropout(Sublayer(x))) (§5.4).

    Dropout then acts on the residual stream itself, the skip path included: every layer's input has
    features zeroed and the rest scaled by 1/(1 - p), while the sublayer's output is never dropped on its own
    before the sum.
    Without dropout (evaluation, or p = 0) it computes what post_ln does; only training differs.
    """

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.dropout(self.norm(x + sublayer(x)))
