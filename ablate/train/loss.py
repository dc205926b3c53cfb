"""The training loss: label-smoothed cross-entropy summed over the target tokens (§5.4), by torch or in chunks.

`torch` is F.cross_entropy on the logits cast to fp32 whole. `chunked` computes the same sum with its own
backward, a chunk of rows at a time (`chunk_rows`): each chunk is cast to fp32 while it is in the cache, the
forward keeps one
log-sum-exp a row, and the backward writes softmax − (1 − ε)·onehot − ε/V in one pass into the logits'
dtype. torch's backward of a smoothed loss makes four passes over (rows × vocabulary) in fp32 (a zero fill,
the NLL's scatter, the smoothing's broadcast, log_softmax's backward); in bf16 the chunked loss keeps no
fp32 copy of the logits at all. The same loss to round-off (tests/test_loss.py); benchmarks/levers.py
measures the step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK = 64  # rows a chunk: 64 × a 10,000-word vocabulary in fp32 is 2.5 MB, about a core's L2
MIN_CHUNK_LOGITS = 64 * 4096  # 1 MB in fp32: smaller chunks spend their time in per-operator overhead
KERNELS = ("torch", "chunked")


def smoothed_cross_entropy_sum(logits: Tensor, labels: Tensor, label_smoothing: float, ignore_index: int,
                               kernel: str = "torch") -> Tensor:  # fmt: skip
    """Σ over rows whose label is not `ignore_index` of −(1 − ε)·log p(label) − (ε/V)·Σ_v log p(v), in fp32.

    `logits`: (N, V) in any float dtype; `labels`: (N,). With ε = 0 it is the NLL.
    """
    if kernel == "torch":
        return F.cross_entropy(logits.float(), labels, ignore_index=ignore_index, label_smoothing=label_smoothing,
                               reduction="sum")  # fmt: skip
    if kernel == "chunked":
        return _ChunkedSmoothedCrossEntropy.apply(logits, labels, label_smoothing, ignore_index)
    raise ValueError(f"cross-entropy kernel {kernel!r}: expected one of {', '.join(KERNELS)}")


def chunk_rows(vocabulary: int) -> int:
    """Rows a chunk: as many as hold MIN_CHUNK_LOGITS logits, and never fewer than CHUNK. With 500 words, 64
    rows are 32,000 logits, and the smoke model's 2,000 rows made 32 chunks of about ten operators each way: 524
    rows a chunk computed the loss and its gradient 1.9x as fast (benchmarks/loss_chunks.py). From 4,096 words
    on it is 64, as the committed runs were trained."""
    return max(CHUNK, MIN_CHUNK_LOGITS // vocabulary)


class _ChunkedSmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, labels: Tensor, epsilon: float, ignore_index: int) -> Tensor:
        n, vocabulary = logits.shape
        kept = labels != ignore_index
        targets = labels.masked_fill(~kept, 0)  # any valid index: an ignored row is weighted 0
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        chunk = chunk_rows(vocabulary)
        for start in range(0, n, chunk):
            rows = slice(start, start + chunk)
            z = logits[rows].float()
            lse[rows] = torch.logsumexp(z, dim=-1)
            z_label = z.gather(1, targets[rows, None]).squeeze(1)
            loss = lse[rows] - (1.0 - epsilon) * z_label - (epsilon / vocabulary) * z.sum(dim=-1)
            total += loss.masked_fill(~kept[rows], 0.0).sum()
        ctx.save_for_backward(logits, targets, kept, lse)
        ctx.epsilon = epsilon
        return total

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        logits, targets, kept, lse = ctx.saved_tensors
        epsilon, (n, vocabulary) = ctx.epsilon, logits.shape
        weight = kept.float() * grad  # d total / d row loss
        out = torch.empty_like(logits)
        chunk = chunk_rows(vocabulary)
        for start in range(0, n, chunk):
            rows = slice(start, start + chunk)
            g = logits[rows].to(torch.float32, copy=True)  # never in place on the saved logits
            g.sub_(lse[rows, None]).exp_().sub_(epsilon / vocabulary)  # softmax − ε/V
            g.scatter_add_(1, targets[rows, None], g.new_full((g.shape[0], 1), -(1.0 - epsilon)))
            out[rows] = g.mul_(weight[rows, None])
        return out, None, None, None
