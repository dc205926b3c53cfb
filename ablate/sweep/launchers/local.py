"""The local launcher: each job in a worker process of its own, pinned to its GPUs or to its CPU cores, forked
from a process that has imported torch already (ablate.train.forkserver) so that it starts at once.

On N GPUs up to N / K jobs train at once, each with its own K GPUs (CUDA_VISIBLE_DEVICES; torchrun
and DDP when K > 1), or with --runs-per-gpu R up to R jobs a GPU, each new one on the GPU with the
fewest. On C CPU cores up to C / T jobs train at once, each pinned to its own T cores
(sched_setaffinity) with T threads. A job that ends, however it ends, hands its GPUs or cores to the
next. A job does not start while the machine's available memory is below what a run is expected to
need (the largest peak seen in this sweep), unless nothing else is running. A job whose lock another
process holds when its turn comes (two sweeps on one results folder) is left to it, reported busy, with no
worker started. Ctrl-C reaches the sweep, which asks each worker to checkpoint and stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from ablate.errors import UserError
from ablate.rundir import LOG, Exit, RunLock, checkpoint_step
from ablate.sweep.devices import Resources, place, visible_devices
from ablate.sweep.launchers import Interrupted, Outcomes, outcome
from ablate.sweep.progress import SweepView
from ablate.train.children import a_child_of_the_sweep, signals_held
from ablate.train.forkserver import Forked, ForkServer, NotForked, available
from ablate.train.job import Job


def worker_command(job: Job) -> list[str]:
    """How a job is started: one Python process, or torchrun with one process per GPU."""
    if job.gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={job.gpus}",
                "-m", "ablate.worker", str(job.directory)]  # fmt: skip
    return [sys.executable, "-m", "ablate.worker", str(job.directory)]


def worker_env(job: Job, visible_gpus: Sequence[int] | None = None) -> dict[str, str]:
    """The worker's environment: the sweep's, with the job's GPUs (CUDA_VISIBLE_DEVICES) and threads."""
    env = dict(os.environ)
    if visible_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices(list(visible_gpus), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if job.threads is not None:
        env["OMP_NUM_THREADS"] = str(job.threads)
    return env


def start_worker(
    job: Job, visible_gpus: Sequence[int] | None = None, server: ForkServer | None = None
) -> subprocess.Popen | Forked:
    """Starts a job in its own process group (Ctrl-C reaches the sweep, which forwards it), logging to worker.log,
    pinned to `job.cpu_ids` before its first line of Python, so OpenMP's threads are made on those cores. Forked
    from `server` (torch imported already) where there is one and the job is one process; else a fresh process."""
    env, cores = worker_env(job, visible_gpus), set(job.cpu_ids)
    forked = server is not None and job.gpus <= 1
    with open(job.directory / LOG, "a", encoding="utf-8") as log:
        how = " ".join(worker_command(job))
        if forked:
            origin = "the server forked from the sweep" if server.forked_here else "the fork server"
            how = f"forked from {origin}: python -m ablate.worker {job.directory}"
        pinned = f" (cores {','.join(map(str, sorted(cores)))}, {job.threads} thread(s))" if cores else ""
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {how}{pinned}\n")
        log.flush()
        if forked:
            with contextlib.suppress(NotForked):  # no server, or it ended: a fresh worker instead
                return server.start(job, env, cores)
            log.write("the fork server could not start this worker: starting it fresh\n")
            log.flush()

        def setup() -> None:  # in the child, before it runs Python
            a_child_of_the_sweep()
            if cores:
                os.sched_setaffinity(0, cores)

        return subprocess.Popen(worker_command(job), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, preexec_fn=setup)  # fmt: skip


MIN_RUN_MIB = 256.0  # what a worker needs at the least (Python with torch), whatever /proc says of one just started


class Pool:
    """What a sweep hands out: GPUs, or CPU cores; a job takes its share and gives it back when it ends."""

    def __init__(self, resources: Resources):
        self.resources = resources
        self.free = sorted(resources.gpus * resources.runs_per_gpu) if resources.gpus else list(resources.cpus)

    def need(self, job: Job) -> int:
        """GPUs or cores the job takes: K GPUs; on the CPU its pinned threads (a reference's) or the sweep's."""
        res = self.resources
        if res.gpus:
            return res.gpus_per_run
        if not res.cpus or not res.threads_per_run:
            return 0  # unpinned: one job at a time, every core
        return job.threads if job.threads is not None and job.threads <= len(res.cpus) else res.threads_per_run

    def take(self, job: Job, running: int) -> list[int] | None:
        """The GPUs or cores for `job` if enough are free now (unpinned CPU: when nothing runs); else None."""
        need = self.need(job)
        if need == 0:
            return [] if running == 0 else None
        if len(self.free) < need:
            return None
        if self.resources.gpus and self.resources.runs_per_gpu > 1:  # one GPU a job: the one with most room
            gpu = max(sorted(set(self.free)), key=self.free.count)
            self.free.remove(gpu)
            return [gpu]
        taken, self.free = self.free[:need], self.free[need:]
        return taken

    def give_back(self, taken: list[int]) -> None:
        self.free = sorted(self.free + taken)


REFRESH_S = 0.5  # the progress view's refresh; a worker's end is seen within POLL_S of it
POLL_S = 0.02


Worker = subprocess.Popen | Forked  # started fresh, or forked from the fork server


def wait_for_any(active: Collection[Worker], timeout: float) -> None:
    """Returns when one of `active` has exited, or after `timeout` seconds. A plain sleep of `timeout` would leave
    the next job waiting up to that long for a core that is free (the test suite trains hundreds of short jobs)."""
    deadline = time.monotonic() + timeout
    while not any(p.poll() is not None for p in active) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def available_memory_mib() -> float | None:
    """MemAvailable (Linux): what can be allocated without swapping; None where there is no /proc/meminfo."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable:"))
        return int(line.split()[1]) / 1024
    return None


def resident_mib(pid: int) -> float:
    """A process's resident memory now (VmRSS), 0 when it is gone."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024
    return 0.0


class LocalLauncher:
    """Worker processes on this machine, as many at once as the GPUs, the cores and the memory allow."""

    def __init__(self, resources: Resources, memory: Callable[[], float | None] = available_memory_mib):
        self.resources = resources
        self.memory = memory  # MiB the machine can still give; tests inject their own

    def describe(self) -> str:
        return self.resources.describe()

    def launch(self, jobs: list[Job], view: SweepView) -> Outcomes:
        res = self.resources
        queue, pool = list(jobs), Pool(res)
        active: dict[Worker, tuple[Job, list[int]]] = {}
        server = ForkServer.for_sweep() if available() else None
        results: Outcomes = {}
        peak_mib = 0.0  # the largest peak memory of a run of this sweep so far: what the next is expected to need
        held: str | None = None  # why the next job waits for memory, said once
        user_error: str | None = None
        try:
            while queue or active:
                while queue and user_error is None:
                    need_mib = max([MIN_RUN_MIB, peak_mib, *(resident_mib(p.pid) for p in active)])
                    free_mib = self.memory()
                    if active and free_mib is not None and free_mib < need_mib:
                        if held is None:
                            held = (f"waiting for memory: {free_mib:,.0f} MiB available, a run of this sweep "
                                    f"needs about {need_mib:,.0f} MiB")  # fmt: skip
                            view.say(held)
                        break
                    take = pool.take(queue[0], len(active))
                    if take is None:
                        break
                    job, held = queue.pop(0), None
                    if RunLock(job.directory).held_elsewhere():  # taken by another sweep since this one planned
                        pool.give_back(take)
                        results[job.label] = outcome(job, Exit.BUSY)
                        view.finished(job, results[job.label])
                        continue
                    if res.gpus:
                        place(
                            job,
                            len(take),
                            take,
                            res.device,
                            runs_per_gpu=res.runs_per_gpu,
                            threads=res.threads_per_run if res.runs_per_gpu > 1 else None,
                        )
                    else:
                        place(job, 0, cpu_ids=take)
                    job.save()
                    view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
                    with signals_held():  # a Ctrl-C as the worker starts: raised after it is in `active`
                        active[start_worker(job, take if res.gpus else None, server)] = (job, take)
                wait_for_any(active, REFRESH_S)
                view.refresh()
                for proc in [p for p in active if p.poll() is not None]:
                    job, take = active.pop(proc)
                    pool.give_back(take)  # whatever the job's end, its GPUs or cores go to the next
                    results[job.label] = outcome(job, proc.returncode)
                    peak_mib = max(peak_mib, results[job.label].peak_memory_mib or 0.0)
                    view.finished(job, results[job.label])
                    if proc.returncode == Exit.USER_ERROR:
                        user_error = results[job.label].error
                if user_error is not None and not active:
                    break
        except KeyboardInterrupt:
            _stop(active, view)
            for proc, (job, _) in active.items():  # one that was decoding finishes its result first
                results[job.label] = outcome(job, proc.returncode)
            raise Interrupted(interrupted([job for job, _ in active.values()])) from None
        finally:
            if server is not None:
                server.close()
        if user_error is not None:
            raise UserError(user_error)
        return results


def interrupted(stopped: list[Job]) -> str:
    """What a Ctrl-C left: the runs it stopped that had a checkpoint to resume from, and those that had none yet."""
    saved = [job for job in stopped if checkpoint_step(job.directory, job.config_hash) is not None]
    if not stopped:
        return "interrupted before any run started; run the same command again to start them"
    if not saved:
        which, them = ("the run", "it") if len(stopped) == 1 else (f"any of the {len(stopped)} runs", "them")
        return f"interrupted before {which} saved a checkpoint: the same command starts {them} again from the beginning"
    fresh = len(stopped) - len(saved)
    return (f"interrupted: {len(saved)} run(s) have a checkpoint to resume from" + (f", {fresh} had none yet" if fresh
                                                                                         else "")
            + "; to resume, run the same command again")  # fmt: skip


def _stop(active: dict[Worker, tuple[Job, list[int]]], view: SweepView) -> None:
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
