"""Trains a sweep as several `ablate run` queues sharing one GPU, against a deadline.

A converged run of issue 38 is small (5.5M parameters, batches of about 1,000 tokens): alone it leaves an H100 or
H200 mostly idle, each step bound by kernel launches. N copies of one `ablate run` command share the GPU, each
taking the next job no other holds (the run directories' locks keep them apart, as for two queues on a CPU).

With a deadline (a lent GPU machine is held for minutes), a job that cannot finish in time would only slow the
others: every `--interval` seconds this script measures the steps each job trained since the last look, and
when the steps the jobs have left (the least first) exceed what all of them together train in the time left,
it stops the queues of the jobs beyond that (Ctrl-C: the job saves its checkpoint, as `ablate run` does), so
that the rest finish, and takes a stopped job's lock as soon as its worker lets go of it, so that no other
queue resumes it. At the deadline every queue is stopped the same way.

    python scripts/gpu_queues.py --queues 14 --until EPOCH_SECONDS --results DIR \
        --hold pe/runs/none/seed-2 -- experiments/pe.yaml experiments/scaling.yaml

`ablate run --runs-per-gpu R` now shares a GPU between R jobs of one sweep; this script adds the deadline.
`--hold` takes a job's lock for the script's lifetime, so no queue here trains it (it trains elsewhere).
Plain output, one line a look; ablate's own output goes to DIR/../queue-<i>.log.

Used once, on an H200 for 9 minutes (results/h200/README.md: the command, what it trained, what it cost). It
stopped 13 of its 14 queues there, for 11 jobs: the rule was too careful (with --reserve 90, while a finished
run needed 8 to 12 s after its last step, and rates that included start-up and the budget points' decoding),
and a stopped job was resumed by another queue, which it then stopped in turn (twice), and each stop ended a
queue; the GPU idled for its last 3 minutes. Since then the reserve is 30 s by default and a stopped job's
lock is held.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ablate import rundir


@dataclass
class Job:
    directory: Path
    worker: int
    steps: int  # the job's cap, training.max_steps
    seen: list[tuple[float, int]] = field(default_factory=list)  # (time, last step)

    @property
    def step(self) -> int:
        return self.seen[-1][1] if self.seen else 0

    def rate(self, window: float = 60.0) -> float | None:
        """Steps a second over the last `window` seconds of looks (a decoding at a budget point pauses the
        steps, so one look alone says too little)."""
        if len(self.seen) < 2:
            return None
        t1, s1 = self.seen[-1]
        earlier = [(t, s) for t, s in self.seen[:-1] if t >= t1 - window]
        t0, s0 = earlier[0] if earlier else self.seen[-2]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def paused(self) -> bool:
        """No step since the last look, short of the cap: decoding, validating or saving, not training."""
        return len(self.seen) >= 2 and self.seen[-1][1] == self.seen[-2][1] < self.steps


def last_step(directory: Path) -> int:
    """The last training step metrics.jsonl records (0 before the first)."""
    steps = [r["step"] for r in rundir.read_metrics(directory) if "loss" in r]
    return steps[-1] if steps else 0


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def worker_of(directory: Path) -> int | None:
    """The pid of the worker training a job now: the lock file's holder, if that process is alive and is
    `python -m ablate.worker <directory>` (the file keeps the last holder's pid after it has gone)."""
    try:
        pid = int((directory / rundir.LOCK).read_text().split()[1])
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        cwd = Path(f"/proc/{pid}/cwd").resolve()
    except (OSError, ValueError, IndexError):
        return None
    if "ablate.worker" not in argv:
        return None
    target = next((a for a in reversed(argv) if a), "")
    return pid if (cwd / target).resolve() == directory.resolve() else None


def running(results: Path, held: set[Path]) -> dict[Path, int]:
    """Job directory -> the pid of its worker, for every job training now."""
    found = {}
    for directory in rundir.run_directories(results):
        if directory not in held and rundir.read_result(directory) is None and (pid := worker_of(directory)):
            found[directory] = pid
    return found


def beyond_time(jobs: list[Job], seconds_left: float) -> list[Job]:
    """The job to stop now, if any: the least advanced, when the steps the jobs have left exceed what they all
    train together, at the last minute's rate, in the seconds left.

    One job a look at most, and none while a job pauses (a decoding at a budget point or a validation stops its
    steps, and every job reaches a budget point at about the same time): the sum of the rates is a measurement of
    this mix of jobs, which a stop changes, and the steps of small runs are bound by Python and kernel launches,
    so the jobs left do not take over all of a stopped one's rate. The caller waits GAP seconds after a stop for
    the rates of the new mix. On a lent H200 (2026-11-27, results/h200/README.md) a rule that stopped every job
    beyond the capacity at each look stopped all 14 within 120 s, from a sum measured while they decoded."""
    if any(job.paused() for job in jobs):
        return []
    rates = [r for r in (j.rate() for j in jobs) if r is not None]
    if not rates or sum(rates) * max(seconds_left, 0.0) >= sum(j.steps - j.step for j in jobs):
        return []
    return [max(jobs, key=lambda j: j.steps - j.step)]


GAP = 60.0  # seconds after a stop before the next: Job.rate's window, so that the rates are the new mix's


def interrupt(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, required=True, help="copies of `ablate run` at once")
    parser.add_argument("--until", type=float, required=True, help="the deadline, in seconds since the epoch")
    parser.add_argument(
        "--reserve",
        type=float,
        default=30.0,
        help="seconds a job needs after its last step (averaging, decoding); default 30",
    )
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between looks; default 20")
    parser.add_argument(
        "--settle",
        type=float,
        default=150.0,
        help="seconds after the start before any job is stopped (start-up is slow); default 150",
    )
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--hold", action="append", default=[], metavar="EXPERIMENT/runs/RUN/seed-N")
    parser.add_argument("files", nargs="+", help="after --: the experiment files, as for ablate run")
    args = parser.parse_args()

    held_locks = []
    for name in args.hold:
        lock = rundir.RunLock(args.results / name)
        if not lock.acquire(wait=False):
            parser.error(f"--hold {name}: its lock is taken")
        held_locks.append(lock)
    held = {args.results / name for name in args.hold}

    logs = [(args.results.parent / f"queue-{i}.log").open("w") for i in range(args.queues)]
    command = [sys.executable, "-m", "ablate.cli", "run", *args.files, "--results", str(args.results)]
    queues: list[subprocess.Popen] = []
    for log in logs:
        queues.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        time.sleep(2)  # each queue takes its lock before the next plans
    ours = {q.pid for q in queues}
    start, jobs, stopped, last_stop = time.time(), {}, set(), 0.0
    print(f"{len(queues)} queues: {' '.join(command)}", flush=True)

    while any(q.poll() is None for q in queues) and time.time() < args.until:
        time.sleep(args.interval)
        now = time.time()
        live = running(args.results, held)
        for directory, worker in live.items():
            if directory not in jobs or jobs[directory].worker != worker:
                steps = rundir.read_config(directory)["training"]["max_steps"]
                jobs[directory] = Job(directory, worker, steps)
            jobs[directory].seen.append((now, last_step(directory)))
        current = [jobs[d] for d in live]
        total = sum(r for r in (j.rate() for j in current) if r is not None)
        done = sum(1 for d in rundir.run_directories(args.results) if d not in held and (r := rundir.read_result(d))
                   and r.finished and not r.reused_from)  # fmt: skip
        print(
            f"{now - start:6.0f} s  {len(current)} training, {total:,.0f} steps/s in all, {done} finished  "
            + "  ".join(f"{j.directory.parent.name}/{j.directory.name}@{j.step}" for j in current),
            flush=True,
        )
        if now - start < args.settle or now - last_stop < GAP:
            continue
        for job in beyond_time(current, args.until - now - args.reserve):
            last_stop = now
            queue = parent(job.worker)
            if queue in ours and queue not in stopped:
                print(f"  stopping {job.directory}: it cannot finish before the deadline", flush=True)
                interrupt(queue)
                stopped.add(queue)
                held.add(job.directory)
                lock = rundir.RunLock(job.directory)  # taken when the worker lets go: no queue resumes the job
                threading.Thread(target=lock.acquire, args=(True,), daemon=True).start()
                held_locks.append(lock)

    for q in queues:
        if q.poll() is None:
            interrupt(q.pid)
    deadline = time.time() + 30
    for q in queues:
        try:
            q.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(q.pid, signal.SIGKILL)
    for lock in held_locks:
        lock.release()
    for log in logs:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
