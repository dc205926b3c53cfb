"""Multi-head attention (§3.2) and the scaling of its dot products, the axis the tutorials got wrong.

Shapes: B batch, L query length, M key length, h heads, d_k width of a head's queries and keys, d_v of its
values (model.d_v, d_k unless set apart).
The q, k, v projections are a part of their own (ablate.parts.projections).
Every variant runs through F.scaled_dot_product_attention with an explicit `scale`,
so each gets the fused kernels (`sdpa`: in fp32 on the CPU, where bf16's kernel is slow).

Each class here builds a part declared in ablate/parts/declared.py (what it is, its parameters, its checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.parts import declared
from ablate.parts.declared import SCALING
from ablate.parts.positions import Positions
from ablate.parts.projections import Projection


def sdpa(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
    """F.scaled_dot_product_attention, but in fp32 on the CPU under autocast or for bf16 inputs, its output cast to
    the dtype the kernel would have returned.

    Under bf16 autocast on a CPU, torch's bf16 attention kernel took a third of a base-recipe training step
    on a Zen 4 with native bf16; in fp32 the step was 1.34 times as fast (benchmarks/levers.py,
    benchmarks/README.md). On CUDA bf16 stays bf16, where the fused kernels are fast.
    """
    autocast = q.device.type == "cpu" and torch.is_autocast_enabled("cpu")
    if q.device.type == "cpu" and (autocast or q.dtype == torch.bfloat16):
        dtype = torch.get_autocast_dtype("cpu") if autocast else q.dtype  # what the kernel would have returned
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kwargs).to(dtype)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


@SCALING.builds
class AttentionScaling(declared.AttentionScaling, nn.Module):
    """Base: prepares q and k, and gives the factor that multiplies their dot products."""

    def __init__(self, d_model: int, heads: int, d_k: int):
        super().__init__()
        self.d_model, self.heads, self.d_k = d_model, heads, d_k

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:  # q: (B, h, L, d_k), k: (B, h, M, d_k)
        raise NotImplementedError


@SCALING.register("sqrt_dk")
class SqrtDk(declared.SqrtDk, AttentionScaling):
    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, self.d_k**-0.5


@SCALING.register("sqrt_dmodel")
class SqrtDmodel(declared.SqrtDmodel, AttentionScaling):
    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, self.d_model**-0.5


@SCALING.register("none")
class NoScaling(declared.NoScaling, AttentionScaling):
    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, 1.0


@SCALING.register("qk_norm")
class QKNorm(declared.QKNorm, AttentionScaling):
    def __init__(self, d_model: int, heads: int, d_k: int, init_scale: float):
        super().__init__(d_model, heads, d_k)
        self.g = nn.Parameter(torch.full((heads, 1, 1), init_scale))

    def forward(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        # SDPA takes `scale` as a Python float, so the learned g multiplies q instead.
        return F.normalize(q, dim=-1) * self.g.to(q.dtype), F.normalize(k, dim=-1), 1.0


@dataclass
class KV:
    """Keys (B, h, M, d_k) and values (B, h, M, d_v) kept between decoding steps."""

    k: Tensor | None = None
    v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.size(2)

    def reorder(self, index: Tensor) -> None:
        """Keeps the batch rows `index` (beam search)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


class Probe(Protocol):
    """Computes attention in place of SDPA on a diagnostic step, recording what SDPA hides (model/diagnostics.py)."""

    def __call__(self, attention: Attention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                 scale: float) -> Tensor: ...  # fmt: skip


class Attention(nn.Module):
    """Multi-head attention (§3.2.2): h heads, each of queries and keys d_k wide and values d_v wide, their
    outputs concatenated (h*d_v) and projected back to d_model by W^O."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        d_k: int,
        d_v: int,
        projection: Projection,
        scaling: AttentionScaling,
        dropout: float,
    ):
        super().__init__()
        self.heads, self.d_k, self.d_v, self.dropout = heads, d_k, d_v, dropout
        self.scaling = scaling
        self.w_o = nn.Linear(heads * d_v, d_model)
        # After w_o: init_weights draws in module order, and the committed results need the same initial weights.
        self.projection = projection
        self.probe: Probe | None = None  # set by ablate.model.diagnostics for the steps it measures

    def split_heads(self, x: Tensor, width: int) -> Tensor:
        return x.unflatten(-1, (self.heads, width)).transpose(1, 2)  # (B, L, h*width) -> (B, h, L, width)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool = False) -> Tensor:
        q, k, scale = self.scaling(q, k)
        if self.probe is not None:  # a diagnostic step: the explicit softmax, whose probabilities SDPA never forms
            out = self.probe(self, q, k, v, mask, is_causal, scale)
        else:
            out = sdpa(
                q,
                k,
                v,
                attn_mask=mask,
                is_causal=is_causal,
                scale=scale,
                dropout_p=self.dropout if self.training else 0.0,
            )  # (B, h, L, d_v)
        return self.w_o(out.transpose(1, 2).flatten(2))  # (B, L, h*d_v) -> (B, L, d_model)


class SelfAttention(Attention):
    """Attention of a sequence to itself; q, k, v all projected from it, q and k rotated if positions say so."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        d_k: int,
        d_v: int,
        projection: Projection,
        scaling: AttentionScaling,
        dropout: float,
        positions: Positions,
    ):
        super().__init__(d_model, heads, d_k, d_v, projection, scaling, dropout)
        self.positions = positions

    def forward(self, x: Tensor, mask: Tensor | None = None, causal: bool = False, cache: KV | None = None) -> Tensor:
        """x: (B, L, d_model); mask: (B, 1, 1, M) bool, True where a key may be attended to."""
        offset = len(cache) if cache is not None else 0
        q, k, v = self.projection(x)
        q, k, v = self.split_heads(q, self.d_k), self.split_heads(k, self.d_k), self.split_heads(v, self.d_v)
        q, k = self.positions.rotate(q, offset), self.positions.rotate(k, offset)
        if cache is not None:
            if offset:
                k, v = torch.cat((cache.k, k), dim=2), torch.cat((cache.v, v), dim=2)  # (B, h, offset+L, d_k or d_v)
            cache.k, cache.v = k, v
        length = x.size(1)
        is_causal = causal and length > 1 and offset == 0
        if causal and length > 1 and offset:  # a block of new tokens after cached ones
            mask = torch.ones(length, offset + length, dtype=torch.bool, device=x.device).tril(offset)
        return self.attend(q, k, v, mask, is_causal)


class CrossAttention(Attention):
    """Attention of the decoder to the encoder's output (§3.2.3); the memory's k and v are cached once."""

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor | None, cache: KV | None = None) -> Tensor:
        """x: (B, L, d_model); memory: (B, S, d_model); mask: (B, 1, 1, S) bool."""
        q = self.split_heads(self.projection.queries(x), self.d_k)  # (B, h, L, d_k)
        if cache is not None and cache.k is not None:
            k, v = cache.k, cache.v
        else:
            k, v = self.projection.keys_values(memory)
            k, v = self.split_heads(k, self.d_k), self.split_heads(v, self.d_v)  # (B, h, S, d_k), (B, h, S, d_v)
            if cache is not None:
                cache.k, cache.v = k, v
        return self.attend(q, k, v, mask)
