"""One job in one process, started as `python -m ablate.worker RUN_DIR` (ablate/worker.py) by a launcher, or
forked from a process that has imported torch already (ablate.train.forkserver).

A worker shares no memory with the sweep, so an exception, an out-of-memory error or a kill ends that
job alone, and its peak memory is its own. It holds the run's lock, asks ablate.train.pipeline to train,
decode and score, and writes result.json. SIGINT, SIGTERM or SIGUSR2 (Slurm's warning before a time
limit or a preemption, sent to every process of the job) stops it after the current step, with a
checkpoint; its exit code says how it ended (ablate.rundir.Exit).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import signal
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from ablate.errors import UserError
from ablate.record import Ending, Footprint, Origin, RunResult, Status
from ablate.rundir import Exit, RunLock, read_result, write_result
from ablate.train.job import Job

# oneDNN, torch's library for bf16 matmuls on the CPU, JIT-builds a primitive for each new shape, and two caches keep
# up to 1,024 of them each, with their buffers: oneDNN's own and ideep's, torch's layer over oneDNN. Training batches,
# validation and beam search see many shapes. On a Zen 4, capping oneDNN's cache at 32 took a 100-step bf16 base
# run's peak from 1,971 to 1,293 MiB, and then capping ideep's at 32 took it from 1,285 to 853 MiB, each at the same
# speed; with no oneDNN cache a step was 3.7 times slower (benchmarks/primitive_cache.py, benchmarks/README.md).
PRIMITIVE_CACHES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": 32, "LRU_CACHE_CAPACITY": 32}  # oneDNN's, ideep's


def bound_primitive_caches() -> None:
    """Caps both caches of oneDNN primitives (PRIMITIVE_CACHES) unless the environment sets them; before torch
    loads. The settings pass to every process this one starts."""
    for variable, capacity in PRIMITIVE_CACHES.items():
        os.environ.setdefault(variable, str(capacity))


def exit_at_once(code: int) -> NoReturn:
    """Ends this process with `code` without tearing down what it imported: with torch and torch._dynamo loaded
    that took 2 s of a core, in every worker and every `ablate` command (the test suite starts hundreds). What a
    normal exit does that matters is done first: threads that are not daemons are waited for, atexit's handlers
    run, and the standard streams are flushed. Files are closed as they are written, results atomically."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream closed, or a pipe whose reader has gone
            stream.flush()
    os._exit(code)


class Stop:
    """Set by SIGINT, SIGTERM or SIGUSR2, or when the process that started this one is gone."""

    def __init__(self) -> None:
        self.requested = False
        self.parent = os.getppid()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2):
            signal.signal(sig, self._request)

    def _request(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __call__(self) -> bool:
        return self.requested or os.getppid() != self.parent  # orphaned: the sweep was killed


def main(argv: list[str] | None = None, stop: Stop | None = None, forked: bool = False) -> int:
    """`python -m ablate.worker RUN_DIR`; a forked worker (ablate.train.forkserver) brings the Stop it made first."""
    stop = stop or Stop()  # first: a scheduler's warning may come while torch is still being imported
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ablate.worker RUN_DIR", file=sys.stderr)
        return Exit.USER_ERROR
    bound_primitive_caches()
    from ablate.train import distributed  # torch

    try:
        return execute(Job.load(Path(argv[0])), stop, forked)
    finally:
        distributed.teardown()


def execute(job: Job, stop: Stop | None = None, forked: bool = False) -> int:
    """Trains, evaluates and records one job; returns its exit code. Every rank calls it. `forked`: this process was
    forked from the fork server rather than started fresh (the record says which)."""
    import torch

    from ablate.train import distributed
    from ablate.train.device import Placement
    from ablate.train.pipeline import Measured, train_and_evaluate

    stop = stop or Stop()
    rank, world, local_rank = distributed.setup(job.device)
    placement = Placement.of(job.device, local_rank, job.spec["training"]["precision"], job.threads, rank, world)
    lock = RunLock(job.directory)
    if rank == 0 and not _acquire(lock):
        print(f"{job.directory}: another process ({lock.holder()}) is training this run", file=sys.stderr)
        return Exit.BUSY
    # The sweep planned this job before it waited for the lock; another sweep's worker may have finished the run
    # meanwhile (it held the lock while it decoded the last point). Decoding it again would rewrite its result.
    if distributed.any_rank(rank == 0 and finished(read_result(job.directory), job), placement.device):
        if rank == 0:
            print(f"{job.directory}: another process finished this run while this one waited; nothing to do")
        lock.release()
        return Exit.COMPLETED
    wall = time.perf_counter()
    origin = Origin(torch=torch.__version__, python=platform.python_version(), host=platform.node(),
                    worker="forked" if forked else "fresh", started_at=_now())  # fmt: skip
    if job.gpu_ids:  # what the launcher gave it, and what the process was shown
        origin.gpu_ids, origin.visible_gpus = job.gpu_ids, os.environ.get("CUDA_VISIBLE_DEVICES")
    if job.runs_per_gpu > 1:
        origin.runs_per_gpu = job.runs_per_gpu
    if job.note:
        origin.note = job.note
    if "SLURM_JOB_ID" in os.environ:  # which Slurm job trained it, and how often it was requeued first
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        origin.slurm_job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else os.environ["SLURM_JOB_ID"]
        origin.slurm_restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    code = Exit.COMPLETED
    try:
        measured = train_and_evaluate(job, placement, stop, wall)
    except UserError as error:  # bad input (a corpus file, say): the same for every run, so the sweep stops
        measured = Measured(Ending(status=Status.FAILED, error=" ".join(error.lines)))
        code = Exit.USER_ERROR
    except Exception as error:  # a run's own failure (out of memory, a bug in a plugin) ends that run alone
        measured = Measured(Ending(status=Status.FAILED, error=f"{type(error).__name__}: {error}",
                                   traceback=traceback.format_exc()))  # fmt: skip
        code = Exit.FAILED
    if measured.ending.status == Status.INTERRUPTED:
        lock.release()
        return Exit.INTERRUPTED  # no result.json: the next `ablate run` resumes from the checkpoint
    origin.ended_at = _now()
    if rank == 0:
        took = Footprint(wall_seconds=round(time.perf_counter() - wall, 1))  # a failed run's: this process's
        write_result(job.directory, RunResult.of(job.identity(), took, origin, *measured.pieces()))
    lock.release()
    return code


def finished(result: RunResult | None, job: Job) -> bool:
    """Whether result.json is a finished result of this job's spec (one that stands: never trained again)."""
    return result is not None and result.finished and result.config_hash == job.config_hash


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _acquire(lock: RunLock, patience_s: float = 60.0) -> bool:
    """The run's lock; waits a little for a worker orphaned by a killed sweep to notice and exit."""
    deadline = time.monotonic() + patience_s
    while not lock.acquire(wait=False):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


if __name__ == "__main__":
    exit_at_once(main())
