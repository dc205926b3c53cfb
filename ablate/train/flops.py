"""Training FLOPs, measured by torch's FlopCounterMode, and the device's peak for MFU.

An update's matmul FLOPs (forward and backward; FlopCounterMode counts matmuls and attention) depend
only on each batch's padded shape (B, S, T): projections, feed-forward and the output layer grow as
B·S or B·T, attention as B·S², B·T² and B·S·T. `FlopModel.measure` counts real forward-backward passes
of the run's own model at a few probe shapes, solves for those five coefficients and checks the fit on
a further shape, so every batch afterwards costs a dot product instead of a counted pass.
`FlopModel.cached` keeps the coefficients in the cache directory, keyed by the model's module tree, parameter
shapes, vocabularies and torch's version: seeds and re-runs of one variant share one count (the first counted pass
costs seconds, mostly torch importing its compiler stack for the dispatch mode).

On the CPU, torch's fused attention kernel is not in FlopCounterMode's table and counts zero: probes
run attention on the math backend, whose matmuls are counted (the count is the same as for the fused
kernels that CUDA uses, which the table does cover).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ablate.data.batches import Example, buckets, lengths
from ablate.record import Cost
from ablate.train.bf16 import bf16_matmuls
from ablate.train.device import CoreShare, Placement, device_name

PROBES = ((1, 4, 3), (2, 4, 3), (1, 9, 3), (1, 4, 8), (2, 7, 6), (3, 5, 11))  # (B, S, T): the system's rows
CHECK = (3, 13, 9)  # a shape the fit has not seen


def features(b: int, s: int, t: int) -> list[float]:
    return [b * s, b * t, b * s * s, b * t * t, b * s * t]


@dataclass(frozen=True)
class FlopModel:
    """Forward-and-backward FLOPs of one batch from its padded shape: a dot product of features and coefficients."""

    coefficients: tuple[float, ...]  # of B·S, B·T, B·S², B·T², B·S·T

    def __call__(self, b: int, s: int, t: int) -> float:
        return float(sum(c * f for c, f in zip(self.coefficients, features(b, s, t), strict=True)))

    def batch(self, examples: Sequence[Example] | tuple[np.ndarray, np.ndarray], indices: Iterable[int],
              width: int | None = None) -> float:  # fmt: skip
        """FLOPs of one batch of examples, padded as `collate` pads it (the decoder reads T = target - 1); with a
        bucket `width`, to the bucket's length on both sides. `examples` may be their `lengths` already (a trainer
        passes them, so that a list's are not counted again every step)."""
        src, tgt = examples if isinstance(examples, tuple) else lengths(examples)
        rows = np.fromiter(indices, dtype=np.int64)
        s, t = int(src[rows].max()), int(tgt[rows].max()) - 1
        if width is not None:
            s = t = max(s, t, int(buckets(src[rows], tgt[rows], width).max()))
        return self(len(rows), s, t)

    @classmethod
    def measure(cls, model: torch.nn.Module, vocab: tuple[int, int], device: torch.device) -> FlopModel:
        """Counts the model's forward and backward at the probe shapes and fits the coefficients (exactly)."""
        rows, counts = [], []
        for shape in (*PROBES, CHECK):
            rows.append(features(*shape))
            counts.append(count(model, shape, vocab, device))
        solution, *_ = np.linalg.lstsq(np.array(rows[:-1], dtype=np.float64), np.array(counts[:-1]), rcond=None)
        fitted = cls(tuple(float(round(c)) for c in solution))  # FLOP counts are integers a shape
        if abs(fitted(*CHECK) - counts[-1]) > 1e-6 * counts[-1]:
            raise RuntimeError(f"FLOPs do not follow B·S, B·T and attention's squares: {fitted(*CHECK):.0f} "
                               f"predicted, {counts[-1]} counted at {CHECK}")  # fmt: skip
        return fitted

    @classmethod
    def cached(cls, model: torch.nn.Module, spec: str, vocab: tuple[int, int], device: torch.device) -> FlopModel:
        """`measure`, or its coefficients from an earlier run of the same model on the same kind of device.
        `spec`: the model's spec as text, part of the key with the module tree and the parameters' shapes."""
        shapes = [(name, tuple(p.shape)) for name, p in model.named_parameters()]
        key = json.dumps([spec, repr(model), shapes, list(vocab), device.type, torch.__version__, PROBES, CHECK])
        path = cache_file().parent / "flops" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return cls(tuple(float(c) for c in json.loads(path.read_text())["coefficients"]))
        fitted = cls.measure(model, vocab, device)
        with contextlib.suppress(OSError):  # a read-only cache only costs a count next time
            from ablate.files import write_json

            write_json(path, {"coefficients": list(fitted.coefficients), "model": repr(model), "vocab": list(vocab)})
        return fitted


def count(model: torch.nn.Module, shape: tuple[int, int, int], vocab: tuple[int, int], device: torch.device) -> int:
    """FLOPs that FlopCounterMode counts for one forward and backward of the model on a random batch of `shape`.

    In eval mode (dropout adds no matmul) and under a forked RNG, so that probing changes nothing in training.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    b, s, t = shape
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab[0], (b, s), generator=generator).to(device)  # ids from 4: no <pad>, <s>, </s>
    tgt = torch.randint(4, vocab[1], (b, t), generator=generator).to(device)
    was_training = model.training
    model.eval()
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with (
            torch.random.fork_rng(devices=devices),
            sdpa_kernel(SDPBackend.MATH),
            FlopCounterMode(display=False) as counter,
        ):
            model(src, tgt).float().sum().backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return int(counter.get_total_flops())


# The device's peak, measured once a machine and cached: a timed square matmul in the run's precision. A
# measurement on a CPU whose cores other processes were using is a busy machine's figure, not the peak: it is
# used for that run, but not kept (in one cache, a 2-thread bf16 peak measured so had stayed at 84 GFLOP/s, under
# the 93 of 1 thread, and a sweep's MFU read 180%).
PEAK_SIZE = {"cpu": 2048, "cuda": 8192}
QUIET = 0.9  # the least share of its cores (CoreShare) a CPU measurement must have had to be cached


def peak_flops(device: torch.device, precision: str, threads: int | None = None) -> float:
    """Dense matmul FLOP/s this device reaches in `precision` (fp32 or bf16) on `threads` CPU threads (default: this
    process's), from the cache or measured now."""
    key = f"{device_name(device)}|{precision}|threads={threads or torch.get_num_threads()}"
    path = cache_file()
    cached: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(path.read_text())
    if key in cached:
        return float(cached[key])
    share = CoreShare() if device.type == "cpu" else None
    previous = torch.get_num_threads()
    if threads is not None and device.type == "cpu":  # the count it is filed under (the sweep's process has more)
        torch.set_num_threads(threads)
    try:
        peak = measure_peak(device, precision)
    finally:
        torch.set_num_threads(previous)
    had = share.stop() if share is not None else None  # None: a GPU, or a CPU that cannot tell (no /proc/stat)
    if had is None or had >= QUIET:
        with contextlib.suppress(OSError):  # a read-only cache only costs a measurement next time
            from ablate.files import write_json

            write_json(path, cached | {key: peak})
    return peak


def measure_peak(device: torch.device, precision: str, seconds: float = 1.0) -> float:
    """The best FLOP/s of a square matmul, timed for `seconds`, computed as a run computes it (bf16 on a CPU without
    native bf16 through ablate.train.bf16's fp32 kernels). The size doubles from 256 while one product takes under
    50 ms, up to PEAK_SIZE."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def timed(a: torch.Tensor, b: torch.Tensor) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    n, largest = 256, PEAK_SIZE["cuda" if device.type == "cuda" else "cpu"]
    with bf16_matmuls(device, precision):  # entered once, not around every timed product
        while True:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            timed(a, b)  # warm-up
            if n >= largest or timed(a, b) >= 0.05:
                break
            n *= 2
        best, deadline = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            best = max(best, 2 * n**3 / timed(a, b))
    return best


def cache_file() -> Path:
    from ablate.files import cache_dir

    return cache_dir() / "peak_flops.v3.json"  # v3: emulated bf16 as ablate.train.bf16 computes it; v2: only quiet ones


def cost(flops: float, seconds: float, target_tokens: int, budget: dict[str, float], peak_tflops: float | None,
         placement: Placement) -> Cost:  # fmt: skip
    """What training cost, as result.json's fields: its FLOPs (measured), their rate, MFU against the device's peak
    (`peak_tflops` from the spec, else measured), and the budget (what stopped the run is the trainer's Outcome)."""
    peak = peak_tflops * 1e12 if peak_tflops else peak_flops(placement.device, placement.precision, placement.threads)
    achieved = flops / seconds if seconds else 0.0
    return Cost(
        train_flops=flops, gflop_per_target_token=significant(flops / max(target_tokens, 1) / 1e9),
        train_tflops_per_s=significant(achieved / 1e12), peak_tflops=significant(peak / 1e12),
        peak_source="spec" if peak_tflops else "measured", mfu=significant(achieved / (peak * placement.world)),
        budget=budget, train_target_tokens=target_tokens,
    )  # fmt: skip


def significant(value: float) -> float:
    """Four significant digits: what the tables show of a rate."""
    return float(f"{value:.4g}")
