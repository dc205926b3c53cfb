"""Where a token sits: positional encodings added to embeddings, or rotations of q and k.

Each class here builds a part declared in ablate/parts/declared.py (what it is, its parameters, its checks).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ablate.parts import declared
from ablate.parts.declared import POSITIONS


@POSITIONS.builds
class Positions(declared.Positions, nn.Module):
    """Base: `forward` adds position information to embeddings; `rotate` acts on q and k."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:  # x: (B, L, d_model)
        return x

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:  # x: (B, h, L, d_k), self-attention q or k
        return x


def sinusoid_table(length: int, d_model: int, offset: int = 0) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...), interleaved (§3.5)."""
    pos = torch.arange(offset, offset + length, dtype=torch.float32)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    angles = pos * inv_freq  # (L, ceil(d_model / 2))
    table = torch.empty(length, d_model)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table


@POSITIONS.register("sinusoidal")
class SinusoidalPositions(declared.SinusoidalPositions, Positions):
    def __init__(self, d_model: int):
        super().__init__(d_model)
        self.register_buffer("table", sinusoid_table(1024, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(1)
        if end > self.table.size(0):  # grow once, geometrically, for long inputs
            self.table = sinusoid_table(max(end, 2 * self.table.size(0)), self.d_model).to(self.table.device)
        return x + self.table[offset:end].to(x.dtype)


@POSITIONS.register("learned")
class LearnedPositions(declared.LearnedPositions, Positions):
    def __init__(self, d_model: int, max_len: int):
        super().__init__(d_model)
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(1)
        if end > self.max_len:
            raise ValueError(f"positions 'learned': a sequence of length {end} is longer than max_len={self.max_len}")
        return x + self.embedding.weight[offset:end].to(x.dtype)


@POSITIONS.register("none")
class NoPositions(declared.NoPositions, Positions):
    pass


@POSITIONS.register("rotary")
class RotaryPositions(declared.RotaryPositions, Positions):
    def __init__(self, d_model: int, base: float):
        super().__init__(d_model)
        self.base = base
        self._cache: tuple[int, int, Tensor, Tensor] | None = None  # (d_k, length, cos, sin)

    def _cos_sin(self, d_k: int, end: int, device: torch.device) -> tuple[Tensor, Tensor]:
        if self._cache is None or self._cache[0] != d_k or self._cache[1] < end or self._cache[2].device != device:
            length = max(end, 1024)
            inv_freq = self.base ** (-torch.arange(0, d_k, 2, dtype=torch.float32, device=device) / d_k)
            angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inv_freq  # (L, d_k/2)
            self._cache = (d_k, length, angles.cos(), angles.sin())
        return self._cache[2], self._cache[3]

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        length, d_k = x.size(-2), x.size(-1)
        cos, sin = self._cos_sin(d_k, offset + length, x.device)
        cos, sin = cos[offset : offset + length].to(x.dtype), sin[offset : offset + length].to(x.dtype)  # (L, d_k/2)
        even, odd = x[..., 0::2], x[..., 1::2]  # (B, h, L, d_k/2) each
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (B, h, L, d_k/2, 2)
        return rotated.flatten(-2)  # (B, h, L, d_k), pairs interleaved back
