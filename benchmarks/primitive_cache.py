"""A cache of oneDNN primitives against a run's speed and peak memory: the same short bf16 run, side by side.

oneDNN, torch's library for bf16 matmuls on the CPU, builds (JIT-compiles) a primitive for each new shape.
Two caches keep them, each up to 1,024 by default, with their buffers: oneDNN's own
(ONEDNN_PRIMITIVE_CACHE_CAPACITY) and ideep's, torch's layer over oneDNN (LRU_CACHE_CAPACITY; `--variable`
chooses). Training batches, validation and beam search see many shapes, so the caches grow with them. This
benchmark trains
experiments/base.yaml's baseline for `--steps` steps in bf16, validates and decodes the test set, as `ablate
run` does, under two capacities at once: one run a capacity, each pinned to its own core with one thread,
then again with the cores swapped, so that a difference between the cores falls on both. It prints each
capacity's training ms a step, decoding sentences a second, wall seconds, peak MiB and BLEU (the run's
result.json): the cache changes which kernels are kept, not what they compute, so BLEU should not move.

    python benchmarks/primitive_cache.py [--variable LRU_CACHE_CAPACITY] [--capacities 1024,32] [--steps 100]
        [--repeat 2]

The other cache keeps a worker's setting (ablate/train/worker.py), unless the environment sets it.

Run it alone, on 2 idle cores or more; bf16 should be native on the CPU (AVX-512 BF16 or AMX), since elsewhere
torch emulates it on other kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHES = ["ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"]  # oneDNN's, ideep's


def start(variable: str, capacity: int, core: int, steps: int, results: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "ablate.cli", "run", "experiments/base.yaml", "--only", "baseline",
               "--results", str(results), "--set", f"training.max_steps={steps}", "--set", "training.precision=bf16",
               "--set", f"training.validate_every={steps}"]  # fmt: skip
    env = os.environ | {variable: str(capacity)}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))  # fmt: skip


def bleu(result: dict) -> float:
    return result["scores"]["test_2016_flickr"]["bleu"]  # base.yaml's test set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variable", default="ONEDNN_PRIMITIVE_CACHE_CAPACITY", choices=CACHES, help="which cache")
    parser.add_argument("--capacities", default="1024,32", help="two capacities of that cache")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the cores swap each round")
    args = parser.parse_args()
    capacities = [int(c) for c in args.capacities.split(",")]
    cores = sorted(os.sched_getaffinity(0))
    if len(capacities) != 2 or len(cores) < 2:
        sys.exit("needs two capacities and two cores")
    rows: dict[int, list[dict]] = {c: [] for c in capacities}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            pair = capacities if r % 2 == 0 else capacities[::-1]
            placed = zip(pair, cores[:2], strict=True)
            procs = {c: start(args.variable, c, core, args.steps, Path(tmp) / f"{r}-{c}") for c, core in placed}
            for c, proc in procs.items():
                _, err = proc.communicate()
                if proc.returncode != 0:
                    sys.exit(f"capacity {c} failed:\n{err}")
                result = json.loads((Path(tmp) / f"{r}-{c}" / "base/runs/baseline/seed-1/result.json").read_text())
                rows[c].append(result)
                core = cores[pair.index(c)]
                print(f"round {r + 1}, capacity {c:>5}, core {core}: {result['step_ms']:.1f} ms a step, "
                      f"{result['decode_sentences_per_s']:.1f} sent/s, {result['wall_seconds']:.0f} s, "
                      f"peak {result['peak_memory_mib']:.0f} MiB, BLEU {bleu(result):.2f}")  # fmt: skip
    print(
        f"{rows[capacities[0]][0]['device']}, torch {rows[capacities[0]][0]['torch']}, bf16, "
        f"{args.steps} steps, medians of {args.repeat} rounds of {args.variable}"
    )
    print(f"{'capacity':>8} {'ms a step':>10} {'sent/s':>8} {'wall s':>7} {'peak MiB':>9} {'BLEU':>6}")
    for c in capacities:
        med = {k: statistics.median(r[k] for r in rows[c]) for k in
               ("step_ms", "decode_sentences_per_s", "wall_seconds", "peak_memory_mib")}  # fmt: skip
        print(f"{c:>8} {med['step_ms']:>10.1f} {med['decode_sentences_per_s']:>8.1f} {med['wall_seconds']:>7.0f} "
              f"{med['peak_memory_mib']:>9.0f} {statistics.median(map(bleu, rows[c])):>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
