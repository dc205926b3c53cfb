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
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ablate.data.tokenizer import PAD

Example = tuple[list[int], list[int]]  # source ids + </s>;  <s> + target ids + </s>


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


def lengths(examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) lengths of every example, int64: a prepared corpus's (ablate.data.prepared) without reading a
    token, a list's by counting."""
    if hasattr(examples, "src_lengths"):
        return examples.src_lengths, examples.tgt_lengths  # type: ignore[attr-defined]
    src = np.fromiter((len(e[0]) for e in examples), dtype=np.int64, count=len(examples))
    tgt = np.fromiter((len(e[1]) for e in examples), dtype=np.int64, count=len(examples))
    return src, tgt


def buckets(src: np.ndarray, tgt: np.ndarray, width: int) -> np.ndarray:
    """`bucket` of every pair from the lengths alone."""
    longest = np.maximum(src, tgt - 1)
    return -(-longest // width) * width


def batch_indices(examples: Sequence[Example], max_tokens: int, seed: int | None,
                  width: int | None = None) -> list[np.ndarray]:  # fmt: skip
    """Indices grouped into batches of similar lengths; with a seed, shuffled within lengths and in order. With a
    bucket `width`, batches of one bucket L each, max_tokens // L pairs (see the module's docstring).

    Planned from the lengths alone: an epoch's plan is one index array and its batches are views of it, however
    large the corpus. The random draws are Python's, shuffling lists of the same lengths as ever, so a seed gives
    the batches it gave when examples were lists (tests/test_prepared.py holds the two equal).
    """
    src, tgt = lengths(examples)
    if width is not None:
        return _bucketed(src, tgt, max_tokens, seed, width)
    rng = random.Random(seed)
    order = shuffled(len(src), rng) if seed is not None else np.arange(len(src), dtype=np.int64)
    key = src[order].astype(np.int64) * (int(tgt.max(initial=0)) + 1) + tgt[order]  # ties in length: the shuffle's
    order = order[np.argsort(key, kind="stable")]  # a stable sort by length, as list.sort is
    del key
    cuts, longest, rows, position = [], 0, 0, 0
    widest = np.maximum(src, tgt)
    for first in range(0, len(order), CHUNK):  # Python ints a chunk at a time, not a list of the whole corpus
        for length in widest[order[first : first + CHUNK]].tolist():
            if rows and max(longest, length) * (rows + 1) > max_tokens:
                cuts.append(position)
                longest, rows = 0, 0
            longest, rows, position = max(longest, length), rows + 1, position + 1
    batches = np.split(order, cuts) if len(order) else []
    if seed is not None:
        rng.shuffle(batches)
    return batches


CHUNK = 1 << 20  # pairs whose lengths become Python ints at once while an epoch is cut into batches


def shuffled(n: int, rng: random.Random, values: np.ndarray | None = None) -> np.ndarray:
    """`values` (default 0..n-1) in the order `rng.shuffle` gives a list of them, the same draws, but shuffled in an
    array of 8-byte integers (random.shuffle takes any mutable sequence), not a list of Python ints: 8 bytes a pair
    where a list takes 36, for a corpus of millions."""
    order = array("q")
    order.frombytes((np.arange(n, dtype=np.int64) if values is None else values.astype(np.int64)).tobytes())
    rng.shuffle(order)
    return np.frombuffer(order, dtype=np.int64)


def _bucketed(src: np.ndarray, tgt: np.ndarray, max_tokens: int, seed: int | None, width: int) -> list[np.ndarray]:
    rng = random.Random(seed)
    of = buckets(src, tgt, width)
    batches: list[np.ndarray] = []
    for length in np.unique(of).tolist():
        members = np.flatnonzero(of == length)
        if seed is not None:
            members = shuffled(len(members), rng, members)
        rows = max(1, max_tokens // length)
        batches += [members[k : k + rows] for k in range(0, len(members), rows)]
    if seed is not None:
        rng.shuffle(batches)
    return batches


def batches(examples: Sequence[Example], max_tokens: int, seed: int | None = None) -> list[Batch]:
    return [collate([examples[i] for i in idx]) for idx in batch_indices(examples, max_tokens, seed)]
