"""Trains a list of jobs on one shared GPU, one `ablate run` a job, against a deadline.

A converged run of issue 38 is small (5.5M parameters, batches of about 1,000 tokens): alone it leaves an H200
mostly idle, each step bound by Python and kernel launches: on an H200 under MPS, three at once trained 16 to 23
steps a second each, 21 at once about 14 each, 220-320 in all (results/h200/README.md). Many at once fill the GPU.
Each job here is its own command,

    ablate run experiments/EXP.yaml --only RUN --set training.seed=N --seeds 1 --results DIR

which plans the same job, with the same spec and config hash, as the sweep's seed-N job of RUN, so that no two
commands ever plan the same job (scripts/gpu_queues.py's queues raced for theirs) and one job can be stopped
alone. `ablate run --runs-per-gpu R` shares a GPU within one experiment, but trains the experiments of a command
one after another, and has no deadline. Each command here is given `--runs-per-gpu` --max-running, so that its
record says the GPU was shared and the report marks its speed cells with † (the H200's runs of 2026-11-26
trained before this, and their records do not say so).

    python scripts/gpu_jobs.py --until EPOCH_SECONDS --results DIR --max-running 21 -- \
        heads:baseline:1 heads:heads=1:1 ... norm:pre_ln:3 table3:d_k=16:1

Up to --max-running jobs train at once, in the order given. Every --interval seconds the script looks at the
steps each job has trained (metrics.jsonl). After --settle seconds, when the steps the running jobs have left
exceed what they train together before the deadline (less --reserve for the averaging and decoding after the
last step), the least advanced is stopped (Ctrl-C: it saves its checkpoint), so that the rest finish: one job a
look, none while a job pauses to decode or validate, and the next no sooner than a minute later, when the rates
are the new mix's (scripts/gpu_queues.py's beyond_time says why). A waiting job starts in a free slot only while
the slowest job that completed so far would still finish before the deadline (a run that diverged in a minute
says nothing of a run's time). Plain output, one line a look; each job's own output goes to DIR/../EXP-RUN-N.log.

Size --max-running to the window rather than leave it to the rule: a capped converged run is 8,000 steps and
about 120 s more of start-up, averaging and decoding (its wall time less its training time, which holds its
validations), and on the third lease 14 jobs at once trained about 160-220
steps a second in all, 4 at once 50-90, and table3's layers=2 (2+2 layers) alone about 26. A stopped job resumes
from its checkpoint on the same machine (the same command again); the checkpoints do not come back from a lent
one.

Used on a lent H200 on 2026-11-26 and 2026-11-27 (results/h200/README.md, second and third leases: the commands,
what they trained, and what went wrong).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_queues import GAP, Job, beyond_time, last_step

from ablate import rundir
from ablate.record import Status

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--until", type=float, required=True, help="the deadline, in seconds since the epoch")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--max-running", type=int, default=21, help="jobs at once; default 21")
    parser.add_argument(
        "--reserve",
        type=float,
        default=30.0,
        help="seconds a job needs after its last step (averaging, decoding); default 30",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=150.0,
        help="seconds after the start before any job is stopped (start-up is slow); default 150",
    )
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between looks; default 20")
    parser.add_argument("jobs", nargs="+", metavar="EXPERIMENT:RUN:SEED")
    args = parser.parse_args()

    pending = [item.split(":") for item in args.jobs]
    for item in pending:
        if len(item) != 3 or not (ROOT / "experiments" / f"{item[0]}.yaml").is_file() or not item[2].isdigit():
            parser.error(f"{':'.join(item)}: expected EXPERIMENT:RUN:SEED, with experiments/EXPERIMENT.yaml")
    args.results.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen] = {}
    dirs: dict[str, Path] = {}
    began: dict[str, float] = {}

    def launch(experiment: str, run: str, seed: str) -> None:
        name = f"{experiment}:{run}:{seed}"
        command = [sys.executable, "-m", "ablate.cli", "run", f"experiments/{experiment}.yaml", "--only", run,
                   "--set", f"training.seed={seed}", "--seeds", "1", "--results", str(args.results),
                   "--runs-per-gpu", str(args.max_running)]  # fmt: skip
        with (args.results.parent / f"{experiment}-{run}-{seed}.log").open("w") as log:
            procs[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        dirs[name] = args.results / experiment / "runs" / run / f"seed-{seed}"
        began[name] = time.time()

    while pending and len(procs) < args.max_running:
        launch(*pending.pop(0))
        time.sleep(1.5)  # their start-ups (imports, CUDA) spread out
    print(f"{len(procs)} jobs started, {len(pending)} waiting", flush=True)
    start, jobs, stopped, timed, took, last_stop = time.time(), {}, set(), set(), [], 0.0

    while time.time() < args.until:
        time.sleep(args.interval)
        now = time.time()
        current = []
        for name, proc in procs.items():
            if proc.poll() is not None or name in stopped or not (dirs[name] / rundir.CONFIG).is_file():
                continue
            if name not in jobs:
                jobs[name] = Job(dirs[name], proc.pid, rundir.read_config(dirs[name])["training"]["max_steps"])
            jobs[name].seen.append((now, last_step(dirs[name])))
            current.append(jobs[name])
        results = {name: rundir.read_result(d) for name, d in dirs.items()}
        for name, proc in procs.items():
            if proc.poll() is not None and name not in timed:
                timed.add(name)
                if (result := results[name]) is not None and result.status == Status.COMPLETED:
                    took.append(now - began[name])
        done = [name for name, r in results.items() if r is not None and r.finished]
        failed = [name for name, p in procs.items() if p.poll() not in (None, 0) and name not in stopped]
        total = sum(r for r in (j.rate() for j in current) if r is not None)
        print(f"{now - start:5.0f} s  {len(current)} training, {total:,.0f} steps/s in all, {len(done)} finished, "
              f"{len(failed)} failed  " + " ".join(f"{j.directory.parent.name}/{j.directory.name}@{j.step}"
                                                   for j in current), flush=True)  # fmt: skip
        running = sum(1 for p in procs.values() if p.poll() is None)
        while pending and took and running < args.max_running and args.until - now > 1.1 * max(took):
            print(f"  starting {':'.join(pending[0])}", flush=True)
            launch(*pending.pop(0))
            running += 1
        if running == 0:
            break
        if now - start < args.settle or now - last_stop < GAP:
            continue
        started = [job for job in current if job.step > 0]  # one still starting has no rate yet: never stopped
        for job in beyond_time(started, args.until - now - args.reserve):
            last_stop = now
            name = next(n for n, j in jobs.items() if j is job)
            print(f"  stopping {name}: it cannot finish before the deadline", flush=True)
            os.killpg(procs[name].pid, signal.SIGINT)
            stopped.add(name)

    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.time() + 30
    for proc in procs.values():
        try:
            proc.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    done = [name for name, d in dirs.items() if (r := rundir.read_result(d)) is not None and r.finished]
    print(f"end: {len(done)} finished: {' '.join(done)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
