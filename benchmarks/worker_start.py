"""Workers forked from the fork server against workers started fresh: a sweep of short jobs, side by side in time.

A fresh worker imports torch, and torch._dynamo when it makes its optimizer, before its first step; a forked one
(ablate.train.forkserver) starts with both imported. This benchmark runs the same sweep of short jobs, the
smoke experiment's baseline with `--seeds` seeds of `--steps` steps each (every job trains, validates,
decodes and scores test_2017_mscoco, as the test suite's jobs do), as `ablate run` runs it, on the cores
this process may use, once with ABLATE_FORKSERVER=0 and once as is, alternating which goes first round by
round. It prints each sweep's wall seconds; its CPU seconds (the sweep's, every worker's and the server's: a
figure that another process on the same cores changes less); the mean of its workers' own wall seconds (from
the run's lock taken to result.json written, so without a fresh worker's imports of torch, but with its import
of torch._dynamo); their peak resident memory; and whether both sweeps measured the same validation losses (a
forked worker computes what a fresh one does).

    ABLATE_DATA_DIR=... python benchmarks/worker_start.py [--seeds 6] [--steps 5] [--rounds 3]

One warm-up sweep first fills the tokenizer cache. Pin it with taskset to the cores to measure on.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"fresh": "0", "forked": "1"}  # ABLATE_FORKSERVER


def sweep(mode: str, seeds: int, steps: int, results: Path, cache: Path) -> dict:
    """One `ablate run` of the sweep: its wall seconds and its workers' records."""
    command = [sys.executable, "-m", "ablate.cli", "run", "experiments/smoke.yaml", "--only", "baseline",
               "--seeds", str(seeds), "--set", f"training.max_steps={steps}", "--set",
               f"training.validate_every={steps}", "--results", str(results)]  # fmt: skip
    env = os.environ | {"ABLATE_FORKSERVER": MODES[mode], "ABLATE_CACHE_DIR": str(cache)}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"the {mode} sweep failed:\n{done.stderr}")
    records = [json.loads(p.read_text()) for p in sorted(results.glob("smoke/runs/baseline/seed-*/result.json"))]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime  # the sweep and every worker
    return {"wall": wall, "cpu": cpu, "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="jobs in the sweep")
    parser.add_argument("--steps", type=int, default=5, help="training steps of each job")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the order of the two sweeps swaps each round")
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        sweep("fresh", 1, args.steps, Path(tmp) / "warm-up", cache)
        for r in range(args.rounds):
            for mode in list(MODES) if r % 2 == 0 else list(MODES)[::-1]:
                row = sweep(mode, args.seeds, args.steps, Path(tmp) / f"{r}-{mode}", cache)
                rows[mode].append(row)
                workers = row["records"]
                print(f"round {r + 1}, {mode:>6}: {row['wall']:.1f} s ({row['cpu']:.1f} s of CPU), workers "
                      f"{statistics.mean(w['wall_seconds'] for w in workers):.1f} s each, peak "
                      f"{max(w['peak_memory_mib'] for w in workers):.0f} MiB", flush=True)  # fmt: skip
    first = rows["fresh"][0]["records"][0]
    cores = len(os.sched_getaffinity(0))
    print(f"\n{first['device']}, torch {first['torch']}, {args.seeds} jobs of {args.steps} steps, {cores} core(s), "
          f"medians of {args.rounds} rounds")  # fmt: skip
    print("| workers | sweep wall s | sweep CPU s | worker wall s | peak MiB |\n|---|---:|---:|---:|---:|")
    walls, cpus = {}, {}
    for mode, runs in rows.items():
        walls[mode] = statistics.median(r["wall"] for r in runs)
        cpus[mode] = statistics.median(r["cpu"] for r in runs)
        worker = statistics.median(statistics.mean(w["wall_seconds"] for w in r["records"]) for r in runs)
        peak = statistics.median(max(w["peak_memory_mib"] for w in r["records"]) for r in runs)
        print(f"| {mode} | {walls[mode]:.1f} | {cpus[mode]:.1f} | {worker:.1f} | {peak:.0f} |")
    ratios = f"sweep wall {walls['forked'] / walls['fresh']:.2f}, CPU {cpus['forked'] / cpus['fresh']:.2f}"
    print(f"\nforked/fresh: {ratios}")
    losses = {mode: [[w["valid_loss"] for w in r["records"]] for r in runs] for mode, runs in rows.items()}
    same = all(x == losses["fresh"][0] for runs in losses.values() for x in runs)
    print(f"validation losses the same in every sweep: {same}")


if __name__ == "__main__":
    main()
