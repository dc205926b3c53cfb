"""The input projections of multi-head attention: how each head's queries, keys and values are made (§3.2.2).

Shapes: B batch, L length, h heads, d_k width of a head's queries and keys, d_v of its values. A projection
gives q and k as (B, L, h*d_k) and v as (B, L, h*d_v), heads side by side; the attention module splits them
into heads.

Each class here builds a part declared in ablate/parts/declared.py (what it is, its parameters, its checks).
"""

from __future__ import annotations

from torch import Tensor, nn

from ablate.parts import declared
from ablate.parts.declared import PROJECTION


@PROJECTION.builds
class Projection(declared.Projection, nn.Module):
    """Base: makes q, k (B, L, h*d_k) and v (B, L, h*d_v) for one attention module, self- or cross-attention's.

    Self-attention calls the module on its input x; cross-attention calls `queries` on the decoder's
    x and `keys_values` on the encoder's memory, apart, so that the memory's k and v are made once.
    """

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, cross: bool):
        super().__init__()
        self.d_model, self.heads, self.d_k, self.d_v = d_model, heads, d_k, d_v

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # x: (B, L, d_model), self-attention
        raise NotImplementedError

    def queries(self, x: Tensor) -> Tensor:  # x: (B, L, d_model), cross-attention
        raise NotImplementedError

    def keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:  # memory: (B, S, d_model), cross-attention
        raise NotImplementedError


@PROJECTION.register("full")
class FullProjection(declared.FullProjection, Projection):
    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, cross: bool):
        super().__init__(d_model, heads, d_k, d_v, cross)
        # W^Q, W^K, W^V of all h heads packed into one matrix: one matmul instead of 3h. Cross-attention
        # keeps W^Q apart, since the memory's k and v are made once and cached. The packing sets the initial
        # scale too: init_weights draws each nn.Linear from Xavier-uniform of its own shape, so (h·d_k = h·d_v =
        # d_model) self-attention's W^QKV starts within ±√(6 / 4d_model), as fairseq's separate matrices with their gain
        # of 1/√2, and cross-attention's W^Q within ±√(6 / 2d_model), its W^KV within ±√(6 / 3d_model).
        if cross:
            self.w_q = nn.Linear(d_model, heads * d_k)
            self.w_kv = nn.Linear(d_model, heads * (d_k + d_v))
        else:
            self.w_qkv = nn.Linear(d_model, heads * (2 * d_k + d_v))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        width = self.heads * self.d_k
        q, k, v = self.w_qkv(x).split((width, width, self.heads * self.d_v), dim=-1)  # (B, L, h*(2d_k + d_v))
        return q, k, v

    def queries(self, x: Tensor) -> Tensor:
        return self.w_q(x)  # (B, L, h*d_k)

    def keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self.w_kv(memory).split((self.heads * self.d_k, self.heads * self.d_v), dim=-1)
        return k, v  # (B, S, h*d_k), (B, S, h*d_v)


@PROJECTION.register("shared_per_head")
class SharedPerHeadProjection(declared.SharedPerHeadProjection, Projection):
    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, cross: bool):
        super().__init__(d_model, heads, d_k, d_v, cross)
        self.w_q = nn.Linear(d_k, d_k, bias=False)
        self.w_k = nn.Linear(d_k, d_k, bias=False)
        self.w_v = nn.Linear(d_k, d_k, bias=False)

    def per_head(self, w: nn.Linear, x: Tensor) -> Tensor:
        slices = x.unflatten(-1, (self.heads, self.d_k))  # (B, L, d_model) -> (B, L, h, d_k)
        return w(slices).flatten(-2)  # the same W on every head's slice; (B, L, h, d_k) -> (B, L, h*d_k)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.per_head(self.w_q, x), self.per_head(self.w_k, x), self.per_head(self.w_v, x)

    def queries(self, x: Tensor) -> Tensor:
        return self.per_head(self.w_q, x)

    def keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        return self.per_head(self.w_k, memory), self.per_head(self.w_v, memory)
