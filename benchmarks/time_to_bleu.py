"""How long an answer takes here: the seconds of training the base recipe needs to reach given test BLEU levels.

One `ablate run` of experiments/base.yaml's baseline, as a user types it, into a fresh results directory, with
budget points (evaluation.budgets) every `--every` steps up to `--steps`: each point is the run trained to that
length (the mean of its last checkpoints, beam search on test2016, sacreBLEU), so the first point at or above a
level is when a run of that length would have reached it. The seconds are the optimizer steps' own, summed
from metrics.jsonl (validation, checkpoints and the points' decoding not counted; the wall clock is printed
beside them). The CPU (model, ISA, bf16, threads), torch and precision are printed with the figures.

    python benchmarks/time_to_bleu.py [--steps 2400] [--every 300] [--levels 30,32,34,35,36,37]
                                      [--set training.adam_kernel=fused] [--keep DIR] [--pinned]

experiments/base.yaml pins the kernels the committed evidence was trained with; this trains with ablate's
defaults (benchmarks/defaults.py) unless `--pinned`.

On a machine with a GPU the run trains there (`ablate run`'s device auto), its step as CUDA graphs once base.yaml's
batches are bucketed (`--set training.shape_buckets=8`); `--set training.cuda_graphs=false` times the eager step.

The levels are test BLEU, read off a run, not chosen on it: nothing here is tuned on the test set.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from defaults import default_kernels  # benchmarks/defaults.py

from ablate.rundir import read_metrics, read_result, seed_dirs

ROOT = Path(__file__).resolve().parents[1]
SPLIT = "test_2016_flickr"


def train(steps: int, every: int, overrides: list[str], results: Path) -> Path:
    """Runs the base recipe with budget points; its job directory. Exits when the run fails."""
    budgets = ", ".join(str(b) for b in range(every, steps + 1, every))
    if steps % every:
        budgets += f", {steps}"
    command = [sys.executable, "-m", "ablate.cli", "run", "experiments/base.yaml", "--only", "baseline",
               "--results", str(results), "--set", f"training.max_steps={steps}",
               "--set", f"evaluation.budgets=[{budgets}]", "--set", f"training.validate_every={every}"]  # fmt: skip
    for override in overrides:
        command += ["--set", override]
    print("$ " + " ".join(command[2:]), flush=True)
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        sys.exit("time_to_bleu: the run failed (its worker.log says why)")
    return seed_dirs(results / "base" / "runs" / "baseline")[0]


def curve(directory: Path) -> list[tuple[int, float, float, float]]:
    """(step, test BLEU, training seconds to that step, wall seconds at that step) of each budget point."""
    train_s, wall_s, total = {}, {}, 0.0
    for record in read_metrics(directory):
        if "step_ms" in record and "loss" in record:
            total += record["step_ms"] / 1000
            train_s[record["step"]], wall_s[record["step"]] = total, record["wall_s"]
    result = read_result(directory)
    if result is None or not result.budget_points:
        sys.exit(f"time_to_bleu: {directory} has no budget points")
    return [(p.step, p.bleu(SPLIT), train_s[p.step], wall_s[p.step]) for p in result.budget_points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2400, help="the run's length (default 2400)")
    parser.add_argument("--every", type=int, default=300, help="a budget point every N steps (default 300)")
    parser.add_argument("--levels", default="30,32,34,35,36,37", help="test BLEU levels to time")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as ablate run --set")
    parser.add_argument("--keep", type=Path, default=None, help="results directory to keep (default: a temporary)")
    parser.add_argument("--pinned", action="store_true",
                        help="train with the kernels experiments/base.yaml pins for the committed evidence, not "
                        "ablate's defaults (benchmarks/defaults.py)")  # fmt: skip
    args = parser.parse_args()
    levels = [float(level) for level in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="ablate-ttb-") as tmp:
        results = args.keep or Path(tmp)
        overrides = args.set if args.pinned else [*default_kernels(), *args.set]
        directory = train(args.steps, args.every, overrides, results)
        points, result = curve(directory), read_result(directory)
    print(f"{result.device}, torch {result.torch}, {result.precision}; experiments/base.yaml "
          f"{' '.join(overrides)}; median step {result.step_ms} ms")  # fmt: skip
    print(f"{'step':>6} {'BLEU':>6} {'train s':>8} {'wall s':>8}")
    for step, bleu, seconds, wall in points:
        print(f"{step:>6} {bleu:>6.2f} {seconds:>8.1f} {wall:>8.1f}")
    print(f"{'BLEU >=':>8} {'step':>6} {'train s':>8} {'wall s':>8}")
    for level in levels:
        first = next((p for p in points if p[1] >= level), None)
        if first is None:
            print(f"{level:>8.1f} {'not reached in ' + str(args.steps) + ' steps':>24}")
        else:
            print(f"{level:>8.1f} {first[0]:>6} {first[2]:>8.1f} {first[3]:>8.1f}")


if __name__ == "__main__":
    main()
