"""The chunked loss (training.cross_entropy chunked) with 64 rows a chunk against `chunk_rows`' chunks.

Forward and backward of the label-smoothed loss on fp32 logits of a few (rows, vocabulary) shapes, the two chunk
sizes interleaved in one process: the figures benchmarks/README.md quotes. From 4,096 words on the two are one.

    python benchmarks/loss_chunks.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ablate.train import loss

SHAPES = [(2000, 500), (1500, 1000), (1500, 2000), (1024, 6000)]  # smoke's, tiny.yaml's, and base.yaml's batches


def step_ms(logits: torch.Tensor, labels: torch.Tensor) -> float:
    start = time.perf_counter()
    loss.smoothed_cross_entropy_sum(logits, labels, 0.1, 0, "chunked").backward()
    logits.grad = None
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls of each arm, interleaved")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    floor = loss.MIN_CHUNK_LOGITS
    print(f"{torch.get_num_threads()} thread(s), torch {torch.__version__}; median ms of forward + backward")
    print(f"{'rows':>6} {'words':>6} {'64 rows':>9} {'chunk_rows':>11} {'rows a chunk':>13} {'speed-up':>9}")
    for rows, words in SHAPES:
        logits = torch.randn(rows, words, generator=generator).requires_grad_()
        labels = torch.randint(1, words, (rows,), generator=generator)
        times: dict[int, list[float]] = {0: [], floor: []}
        for _ in range(3):  # warm-up
            for arm in times:
                loss.MIN_CHUNK_LOGITS = arm
                step_ms(logits, labels)
        for _ in range(args.repeats):
            for arm in times:
                loss.MIN_CHUNK_LOGITS = arm
                times[arm].append(step_ms(logits, labels))
        loss.MIN_CHUNK_LOGITS = floor
        old, new = statistics.median(times[0]), statistics.median(times[floor])
        print(f"{rows:>6} {words:>6} {old:>9.2f} {new:>11.2f} {loss.chunk_rows(words):>13} {old / new:>8.2f}x")


if __name__ == "__main__":
    main()
