"""Token-based batches: pairs of similar length together, at most `max_tokens` (padding included) a batch.

Two ways to cut them. By default a batch is padded to its longest sentence, so its shape (rows, source and
target length) is nearly always new. With a bucket width w (training.shape_buckets), every pair belongs to the
bucket of its length rounded up to a multiple of w, source and target alike; a batch holds pairs of one bucket
L, max_tokens // L of them (the last batch of a bucket fewer), padded to L on both sides. An epoch then has two
shapes a bucket, so the kernels a shape needs (oneDNN builds one for each new matmul shape and keeps a few)
are built once, not every step: benchmarks/README.md measures it.
"""

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
        """On `device`. To a GPU from pinned memory, without waiting: the host prepares the next step's batch while
        the device still computes this one (training.sync_every lets the host run ahead)."""
        if device.type != "cuda" or self.src.device.type == "cuda":
            return Batch(self.src.to(device), self.tgt.to(device), self.src_tokens, self.tgt_tokens)
        src, tgt = self.src.pin_memory(), self.tgt.pin_memory()
        return Batch(src.to(device, non_blocking=True), tgt.to(device, non_blocking=True), self.src_tokens,
                     self.tgt_tokens)  # fmt: skip


def pad(rows: Sequence[list[int]], length: int | None = None) -> Tensor:
    """Right-padded to the longest row, or to `length` when that is longer."""
    width = max(length or 0, *(len(r) for r in rows))
    return torch.tensor([[*row, *[PAD] * (width - len(row))] for row in rows], dtype=torch.long)


def bucket(example: Example, width: int) -> int:
    """The bucket of a pair: its longer side (the source, or the target the decoder reads: without </s>'s shift)
    rounded up to a multiple of `width`."""
    longest = max(len(example[0]), len(example[1]) - 1)
    return -(-longest // width) * width


def collate(examples: Sequence[Example], width: int | None = None) -> Batch:
    """A batch padded to its longest sentence, or with a bucket `width` to the bucket of its longest pair on both
    sides (the target one longer: the decoder reads tgt[:, :-1])."""
    length = max(bucket(e, width) for e in examples) if width else None
    return Batch(
        pad([e[0] for e in examples], length),
        pad([e[1] for e in examples], length + 1 if length else None),
        sum(len(e[0]) for e in examples),
        sum(len(e[1]) - 1 for e in examples),
    )


def batch_indices(examples: Sequence[Example], max_tokens: int, seed: int | None,
                  width: int | None = None) -> list[list[int]]:  # fmt: skip
    """Indices grouped into batches of similar lengths; with a seed, shuffled within lengths and in order. With a
    bucket `width`, batches of one bucket L each, max_tokens // L pairs (see the module's docstring)."""
    if width is not None:
        return _bucketed(examples, max_tokens, seed, width)
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


def _bucketed(examples: Sequence[Example], max_tokens: int, seed: int | None, width: int) -> list[list[int]]:
    rng = random.Random(seed)
    buckets: dict[int, list[int]] = {}
    for i, example in enumerate(examples):
        buckets.setdefault(bucket(example, width), []).append(i)
    batches = []
    for length, members in sorted(buckets.items()):
        if seed is not None:
            rng.shuffle(members)
        rows = max(1, max_tokens // length)
        batches += [members[k : k + rows] for k in range(0, len(members), rows)]
    if seed is not None:
        rng.shuffle(batches)
    return batches


def batches(examples: Sequence[Example], max_tokens: int, seed: int | None = None) -> list[Batch]:
    return [collate([examples[i] for i in idx]) for idx in batch_indices(examples, max_tokens, seed)]
