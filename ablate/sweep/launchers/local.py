"""The local launcher: each job in a worker process of its own, pinned to its GPUs or to the CPU.

On N GPUs up to N / K jobs train at once, each with its own K GPUs (CUDA_VISIBLE_DEVICES; torchrun
and DDP when K > 1); a job that ends, however it ends, hands its GPUs to the next. On the CPU, one
job at a time with every core. Ctrl-C reaches the sweep, which asks each worker to checkpoint and stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from ablate.errors import UserError
from ablate.rundir import LOG, Exit, checkpoint_step
from ablate.sweep.devices import Resources, place
from ablate.sweep.launchers import Interrupted, Outcomes, outcome
from ablate.sweep.progress import SweepView
from ablate.train.job import Job


def worker_command(job: Job) -> list[str]:
    """How a job is started: one Python process, or torchrun with one process per GPU."""
    if job.gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={job.gpus}",
                "-m", "ablate.worker", str(job.directory)]  # fmt: skip
    return [sys.executable, "-m", "ablate.worker", str(job.directory)]


def start_worker(job: Job, visible_gpus: Sequence[int] | None = None) -> subprocess.Popen:
    """Starts a job in its own process group (Ctrl-C reaches the sweep, which forwards it), logging to worker.log."""
    env = dict(os.environ)
    if visible_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, visible_gpus))
    with open(job.directory / LOG, "a", encoding="utf-8") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(worker_command(job))}\n")
        log.flush()
        return subprocess.Popen(worker_command(job), stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip


def _die_with_parent() -> None:
    """Linux: the worker gets SIGKILL when the sweep dies, even by SIGKILL, so no orphan keeps training."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


class LocalLauncher:
    """Worker processes on this machine, as many at once as the GPUs allow."""

    def __init__(self, resources: Resources):
        self.resources = resources

    def describe(self) -> str:
        return self.resources.describe()

    def launch(self, jobs: list[Job], view: SweepView) -> Outcomes:
        res = self.resources
        queue, free = list(jobs), list(res.gpus)
        active: dict[subprocess.Popen, tuple[Job, list[int]]] = {}
        results: Outcomes = {}
        user_error: str | None = None
        try:
            while queue or active:
                while queue and user_error is None and (len(free) >= res.gpus_per_run if res.gpus else not active):
                    job = queue.pop(0)
                    take, free = free[: res.gpus_per_run], free[res.gpus_per_run :]
                    place(job, len(take), take, res.device)
                    job.save()
                    view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
                    active[start_worker(job, take if res.gpus else None)] = (job, take)
                time.sleep(0.5)
                view.refresh()
                for proc in [p for p in active if p.poll() is not None]:
                    job, take = active.pop(proc)
                    free += take  # whatever the job's end, its GPUs go to the next
                    results[job.label] = outcome(job, proc.returncode)
                    view.finished(job, results[job.label])
                    if proc.returncode == Exit.USER_ERROR:
                        user_error = results[job.label]["error"]
                if user_error is not None and not active:
                    break
        except KeyboardInterrupt:
            _stop(active, view)
            for proc, (job, _) in active.items():  # one that was decoding finishes its result first
                results[job.label] = outcome(job, proc.returncode)
            raise Interrupted() from None
        if user_error is not None:
            raise UserError(user_error)
        return results


def _stop(active: dict[subprocess.Popen, tuple[Job, list[int]]], view: SweepView) -> None:
    """Asks every worker to checkpoint and stop; a second Ctrl-C kills them."""
    view.say(f"stopping: {len(active)} run(s) save a checkpoint first (Ctrl-C again to kill them)")
    for proc in active:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    try:
        for proc in active:
            proc.wait()
    except KeyboardInterrupt:
        for proc in active:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in active:
            proc.wait()
