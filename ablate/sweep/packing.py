"""`ablate run --runs-per-gpu auto`: how many runs share a GPU, chosen by a probe rather than guessed.

A converged run (5.5M parameters, batches of about 1,000 tokens) leaves an H200 mostly idle, so several runs at
once train more steps a second in all, up to a point past which they only share the GPU's time (and its
memory). The probe trains copies of the sweep's first run, 1, 2, 4, ... at once, each in its own process as a
sweep's workers are, and measures their steps a second summed over a few seconds, once every copy's shapes
are built (CUDA graphs captured), and the GPU memory a copy holds (nvidia-smi's used memory, whose difference
counts each process's CUDA context, not only torch's tensors). It doubles while the sum grows by at least
`GAIN` and the next level fits `MEMORY_SHARE` of the GPU's memory, and picks the level with the most steps a
second. The copies train the run's own first updates in its precision: what the sweep's runs will do.

NVIDIA's MPS lets the processes' kernels run at the same time; without it the GPU takes turns between them.
Where `nvidia-cuda-mps-control` is installed and no daemon runs, the probe starts one (it serves the sweep's
runs too) and the plan line says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import UserError
from ablate.sweep.devices import visible_devices

GAIN = 1.10  # the next doubling must add 10% to the summed steps a second
MEMORY_SHARE = 0.9  # of the GPU's memory the runs may hold together
SECONDS = 8.0  # of steps each copy is timed over, all copies at once
UPDATES = 48  # the run's first updates, trained in turn: their shapes are built before the timing starts
READY_TIMEOUT = 600.0  # a copy must have loaded its data and built its shapes by then


@dataclass(frozen=True)
class Level:
    """Runs at once on one GPU, and what they measured."""

    runs: int
    steps_per_s: float  # summed over the runs
    mib_per_run: float  # GPU memory a run held (its CUDA context included)

    def describe(self) -> str:
        return f"{self.runs} → {self.steps_per_s:,.0f} steps/s"


def climb(measure: Callable[[int], Level], gpu_mib: float, most: int) -> list[Level]:
    """Levels of 1, 2, 4, ... runs, measured while doubling pays (`GAIN`), fits the GPU and stays within the
    sweep's `most` jobs."""
    levels = [measure(1)]
    while True:
        last = levels[-1]
        runs = min(2 * last.runs, most)
        if runs <= last.runs or runs * last.mib_per_run > MEMORY_SHARE * gpu_mib:
            return levels
        levels.append(measure(runs))
        if levels[-1].steps_per_s < GAIN * last.steps_per_s:
            return levels


def best(levels: Sequence[Level]) -> Level:
    """The level with the most steps a second; of two within `GAIN` of each other, the fewer runs (each run's own
    speed is then nearer its speed alone)."""
    top = max(level.steps_per_s for level in levels)
    return min((level for level in levels if level.steps_per_s * GAIN >= top), key=lambda level: level.runs)


def choose(file: str, overrides: Sequence[str], run: str, jobs: int, gpu: int,
           say: Callable[[str], None]) -> tuple[int, str]:  # fmt: skip
    """Runs a GPU for a sweep of `jobs` jobs whose first run is `run` of `file`: the probe's choice, and the plan
    line's account of it."""
    memory = gpu_memory(gpu)
    if memory is None:
        raise UserError("--runs-per-gpu auto: nvidia-smi did not answer, so the GPU's memory cannot be measured; "
                        "give a number")  # fmt: skip
    mps = start_mps()
    say(f"--runs-per-gpu auto: probing 1, 2, 4, ... copies of {run} at once on GPU {gpu} ({mps})")

    def measure(runs: int) -> Level:
        level = probe(file, overrides, run, runs, gpu)
        say(f"  {level.describe()} ({level.mib_per_run:,.0f} MiB a run)")
        return level

    levels = climb(measure, memory[1], max(1, jobs))
    chosen = best(levels)
    figures = ", ".join(level.describe() for level in levels)
    return chosen.runs, f"{chosen.runs} runs a GPU (auto: {figures}; {chosen.mib_per_run:,.0f} MiB a run; {mps})"


def probe(file: str, overrides: Sequence[str], run: str, runs: int, gpu: int, device: str = "cuda",
          seconds: float = SECONDS) -> Level:  # fmt: skip
    """`runs` copies of the run trained at once on `gpu`, timed together once all have built their shapes
    (`device` cpu: the same mechanics on the CPU, for tests)."""
    before = gpu_memory(gpu)
    threads = max(1, len(os.sched_getaffinity(0)) // runs)
    with tempfile.TemporaryDirectory(prefix="ablate-probe-") as tmp:
        go = Path(tmp) / "go"
        outs = [Path(tmp) / f"copy-{i}.json" for i in range(runs)]
        env = os.environ | {"CUDA_VISIBLE_DEVICES": visible(gpu), "OMP_NUM_THREADS": str(threads)}
        command = [sys.executable, "-m", "ablate.sweep.packing", file, run, "--go", str(go), "--device", device,
                   "--seconds", str(seconds)]  # fmt: skip
        command += [arg for o in overrides for arg in ("--set", o)]
        logs = [out.with_suffix(".log").open("w") for out in outs]  # a pipe could fill and stall a copy
        procs = [subprocess.Popen([*command, "--out", str(out)], env=env, stdout=log, stderr=subprocess.STDOUT)
                 for out, log in zip(outs, logs, strict=True)]  # fmt: skip
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not all(out.exists() for out in outs):
                failed = next((i for i, p in enumerate(procs) if p.poll() not in (None, 0)), None)
                if failed is not None or time.monotonic() > deadline:
                    log = outs[failed].with_suffix(".log") if failed is not None else None
                    lines = log.read_text().strip().splitlines() if log is not None else []
                    why = lines[-1] if lines else "not ready in time"
                    raise UserError(f"--runs-per-gpu auto: a probe of {run} failed: {why}")
                time.sleep(0.2)
            ready = gpu_memory(gpu)
            go.touch()
            for p in procs:
                p.wait()
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for log in logs:
                log.close()
        results = [json.loads(out.read_text()) for out in outs]
    if any("steps" not in r for r in results):
        raise UserError(f"--runs-per-gpu auto: a probe of {run} ended before it was timed")
    rate = sum(r["steps"] / r["seconds"] for r in results)
    if before is not None and ready is not None:
        held = max(ready[0] - before[0], 0.0) / runs
    else:
        held = max(r["reserved_mib"] for r in results)
    return Level(runs, rate, held)


def visible(gpu: int) -> str:
    """The GPU as CUDA_VISIBLE_DEVICES and nvidia-smi name it (ablate.sweep.devices.visible_devices)."""
    return visible_devices([gpu], os.environ.get("CUDA_VISIBLE_DEVICES"))


def gpu_memory(gpu: int) -> tuple[float, float] | None:
    """Used and total MiB of the GPU (torch's index), from nvidia-smi; None where it does not answer."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", visible(gpu)]
    try:
        used, total = subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout.split(",")
        return float(used), float(total)
    except (subprocess.SubprocessError, ValueError, OSError):
        return None


def start_mps() -> str:
    """MPS as the plan line names it: running already, started here, or not available."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return "no MPS: the GPU takes turns between runs"
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    if (pipe / "control").exists():
        return "MPS running"
    try:
        subprocess.run([control, "-d"], check=True, timeout=30, capture_output=True)
    except (subprocess.SubprocessError, OSError) as e:
        return f"no MPS: nvidia-cuda-mps-control -d failed ({e})"
    return "MPS started: nvidia-cuda-mps-control -d"


def main(argv: Sequence[str] | None = None) -> int:
    """One copy of the probe: builds the run on the GPU, trains its first updates once (shapes built), says it is
    ready, waits for the go, then trains them in turn for SECONDS and writes its steps and seconds."""
    parser = argparse.ArgumentParser(prog="python -m ablate.sweep.packing")
    parser.add_argument("file")
    parser.add_argument("run")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args(argv)

    import torch

    from ablate.sweep.bench import Options, Subject
    from ablate.sweep.experiment import load_experiment

    experiment = load_experiment(args.file, args.overrides)
    run = next((r for r in experiment.runs if r.name == args.run), None)
    if run is None:
        print(f"{args.file}: no run {args.run!r}", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    subject = Subject.of(run, device, Options(device=args.device, updates=UPDATES, decode_sentences=0))
    subject.build()
    trainer = subject.trainer
    assert trainer is not None
    for batches in subject.batches:  # the first is eager (Adam's state), then each shape is captured once
        trainer.update(batches)
    if cuda:
        torch.cuda.synchronize()
    ready = args.out.with_suffix(".ready")
    ready.write_text("{}")
    ready.rename(args.out)  # the parent waits for this file; it is overwritten with the timing below
    while not args.go.exists():
        time.sleep(0.01)
    steps, losses, start = 0, [], time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for batches in subject.batches:
            losses.append(trainer.update(batches))
            steps += 1
            if len(losses) >= 25:  # read as a sweep's run reads them (training.sync_every)
                torch.stack(losses).sum().item()
                losses = []
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    reserved = torch.cuda.max_memory_reserved() / 2**20 if cuda else 0.0
    timing = args.out.with_suffix(".part")
    timing.write_text(json.dumps({"steps": steps, "seconds": seconds, "reserved_mib": reserved}))
    timing.rename(args.out)
    return 0 if math.isfinite(seconds) else 1


def auto(
    launcher: str,
    dry_run: bool,
    device: str | None,
    gpus_per_run: int | None,
    seeds: int | list[int] | None,
    file: Path | str,
    overrides: Sequence[str],
    experiments: list,
    only: list[str],
) -> int:
    """--runs-per-gpu auto resolved: 1 without a GPU, on Slurm or for a dry run; else `choose`'s probe."""
    from ablate.sweep.devices import cuda_available

    if launcher != "local" or dry_run or device == "cpu" or not cuda_available():
        print("--runs-per-gpu auto: 1 (no GPU to probe, a dry run or Slurm)", flush=True)
        return 1
    if (gpus_per_run or 1) > 1:
        raise UserError(f"--runs-per-gpu auto: only with one GPU a run, not --gpus-per-run {gpus_per_run}")
    experiment = experiments[0]
    run = next((r.name for r in experiment.runs if not only or r.name in only), experiment.runs[0].name)
    count = seeds if isinstance(seeds, int) else len(seeds or experiment.seeds or [1])
    jobs = sum(len(e.runs) for e in experiments) * count
    runs, line = choose(str(file), overrides, run, jobs, 0, lambda s: print(s, flush=True))
    print(f"--runs-per-gpu auto: {line}", flush=True)
    return runs


if __name__ == "__main__":
    sys.exit(main())
