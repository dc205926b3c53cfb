"""Token-based batches: pairs of similar length together, at most `max_tokens` (padding included) a batch."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ablate.data.tokenizer import BOS, EOS, PAD, Vocabulary

Example = tuple[list[int], list[int]]  # source ids + </s>;  <s> + target ids + </s>


def encode_pairs(pairs: Sequence[tuple[str, str]], src: Vocabulary, tgt: Vocabulary) -> list[Example]:
    src_ids, tgt_ids = src.encode([p[0] for p in pairs]), tgt.encode([p[1] for p in pairs])
    return [([*s, EOS], [BOS, *t, EOS]) for s, t in zip(src_ids, tgt_ids, strict=True)]


@dataclass
class Batch:
    src: Tensor  # (B, S), right-padded
    tgt: Tensor  # (B, T + 1): the decoder reads tgt[:, :-1] and predicts tgt[:, 1:]
    src_tokens: int  # real tokens, padding not counted
    tgt_tokens: int  # tokens predicted

    def to(self, device: torch.device) -> Batch:
        return Batch(self.src.to(device, non_blocking=True), self.tgt.to(device, non_blocking=True),
                     self.src_tokens, self.tgt_tokens)  # fmt: skip


def pad(rows: Sequence[list[int]]) -> Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def collate(examples: Sequence[Example]) -> Batch:
    return Batch(
        pad([e[0] for e in examples]),
        pad([e[1] for e in examples]),
        sum(len(e[0]) for e in examples),
        sum(len(e[1]) - 1 for e in examples),
    )


def batch_indices(examples: Sequence[Example], max_tokens: int, seed: int | None) -> list[list[int]]:
    """Indices grouped into batches of similar lengths; with a seed, shuffled within lengths and in order."""
    rng = random.Random(seed)
    order = list(range(len(examples)))
    if seed is not None:
        rng.shuffle(order)  # ties in length broken at random, then a stable sort by length
    order.sort(key=lambda i: (len(examples[i][0]), len(examples[i][1])))
    batches, current, longest = [], [], 0
    for i in order:
        length = max(len(examples[i][0]), len(examples[i][1]))
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    if seed is not None:
        rng.shuffle(batches)
    return batches


def batches(examples: Sequence[Example], max_tokens: int, seed: int | None = None) -> list[Batch]:
    return [collate([examples[i] for i in idx]) for idx in batch_indices(examples, max_tokens, seed)]
