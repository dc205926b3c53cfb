"""Runs an hour on this CPU: the same short sweep trained both ways in one invocation.

    side by side   `ablate run`'s default on the CPU: as many runs at once as the jobs and cores allow, each
                   pinned to its own cores with one thread a core (sweep/devices.py)
    one at a time  `--threads-per-run <every core>`: one run after another, each on every core

Each leg is `ablate run` as a user types it, into a fresh results directory, so the figures include
start-up, data loading, validation and decoding: what a sweep costs. The legs run one after the other
on an otherwise idle machine; run it alone. It prints each leg's wall time, runs an hour, and the ratio,
and the aggregate MFU of its training: the runs' mean training FLOP/s times the runs that trained at once,
over the peak of all cores (a timed matmul on every core, in the runs' precision).

    python benchmarks/sweep.py [--experiment experiments/short/pe.yaml] [--steps 200] [--seeds 1] [--only RUN,RUN]
                               [--repeat 1] [--pinned]

experiments/base.yaml pins the kernels the committed evidence was trained with; this trains with ablate's
defaults (benchmarks/defaults.py) unless `--pinned`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from defaults import default_kernels  # benchmarks/defaults.py

from ablate.train.device import cpu_isa, cpu_model, native_bf16
from ablate.train.flops import peak_flops

ROOT = Path(__file__).resolve().parents[1]


def leg(experiment: str, steps: int, seeds: str, only: list[str], threads: int | None, results: Path,
        overrides: list[str]) -> float:  # fmt: skip
    """Wall seconds of one `ablate run` of the short sweep; exits if it fails."""
    command = [sys.executable, "-m", "ablate.cli", "run", experiment, "--results", str(results), "--seeds", seeds,
               "--set", f"training.max_steps={steps}", "--set", f"training.validate_every={steps}"]  # fmt: skip
    command += [arg for override in overrides for arg in ("--set", override)]
    command += [f"--only={name}" for name in only]
    if threads is not None:
        command += ["--threads-per-run", str(threads)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    print(f"    {done.stdout.splitlines()[0]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/short/pe.yaml")
    parser.add_argument("--steps", type=int, default=200, help="training steps of each run")
    parser.add_argument("--only", default="", help="runs of the experiment to train (default: all)")
    parser.add_argument("--seeds", default="1", help="as ablate run --seeds (default: 1, each run once)")
    parser.add_argument("--repeat", type=int, default=1, help="legs of each kind, alternated")
    parser.add_argument("--pinned", action="store_true",
                        help="train with the kernels experiments/base.yaml pins for the committed evidence, not "
                        "ablate's defaults (benchmarks/defaults.py)")  # fmt: skip
    args = parser.parse_args()
    overrides = [] if args.pinned else default_kernels()
    cores = len(os.sched_getaffinity(0))
    only = [name for name in args.only.split(",") if name]
    print(f"{cpu_model()} ({cpu_isa()}, {'native' if native_bf16() else 'emulated'} bf16), {cores} cores; "
          f"{args.experiment}, {args.steps} steps a run; {' '.join(overrides) or 'the kernels it pins'}")  # fmt: skip
    times: dict[str, list[float]] = {"side by side": [], "one at a time": []}
    rates: dict[str, list[float]] = {"side by side": [], "one at a time": []}
    at_once = {"side by side": 1, "one at a time": 1}
    precision, runs = "fp32", 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for name, threads in (("side by side", None), ("one at a time", cores)):
                print(f"  {name} ({i + 1}/{args.repeat}):")
                results = Path(tmp) / f"{name.replace(' ', '-')}-{i}"
                times[name].append(leg(args.experiment, args.steps, args.seeds, only, threads, results, overrides))
                done = [json.loads(path.read_text()) for path in results.glob("*/runs/*/seed-*/result.json")]
                runs, precision = len(done), done[0]["precision"]
                rates[name] += [r["train_tflops_per_s"] * 1e12 for r in done]
                at_once[name] = min(runs, cores // max(r["threads"] for r in done)) if threads is None else 1
    peak = peak_flops(torch.device("cpu"), precision, cores)
    print(f"{'sweep':<15} {'runs':>5} {'wall s':>8} {'runs/hour':>10} {'at once':>8} {'aggregate MFU':>14}")
    rate = {}
    for name, seconds in times.items():
        mean = sum(seconds) / len(seconds)
        rate[name] = runs * 3600 / mean
        mfu = at_once[name] * sum(rates[name]) / len(rates[name]) / peak
        print(f"{name:<15} {runs:>5} {mean:>8.1f} {rate[name]:>10.1f} {at_once[name]:>8} {mfu:>14.1%}")
    print(f"peak of all {cores} cores ({precision}): {peak / 1e9:.1f} GFLOP/s")
    print(f"ratio (side by side / one at a time): {rate['side by side'] / rate['one at a time']:.2f}x")


if __name__ == "__main__":
    main()
