"""Where and how jobs train: worker processes pinned to GPUs (or the CPU), or every rank under torchrun.

On N GPUs up to N / K jobs train at once, each in its own process group pinned to its own K GPUs
(torchrun and DDP when K > 1); on the CPU one at a time with every core. Ctrl-C reaches the sweep,
which asks each worker to checkpoint and stop.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.errors import UserError
from ablate.job import LOG, RESULT, Job, checkpoint_step
from ablate.progress import SweepView
from ablate.results import read_json, write_json
from ablate.worker import EXIT_BUSY, EXIT_INTERRUPTED, EXIT_USER_ERROR


class Interrupted(Exception):  # noqa: N818 (a stop the user asked for, not an error)
    """The sweep was stopped by the user; its workers saved checkpoints."""


@dataclass
class Resources:
    """Where jobs train: the GPUs this sweep may use (none: the CPU) and how many each run takes."""

    gpus: list[int] = field(default_factory=list)
    gpus_per_run: int = 1

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"

    def describe(self) -> str:
        if not self.gpus:
            return "CPU, one run at a time"
        return f"{len(self.gpus)} GPU(s) {self.gpus}, {self.gpus_per_run} a run, {self.parallel} run(s) at once"

    @property
    def parallel(self) -> int:
        return max(1, len(self.gpus) // self.gpus_per_run) if self.gpus else 1


def resources(device: str, gpus_per_run: int) -> Resources:
    """`device` auto (every visible GPU, else the CPU), cpu or cuda; checked against what is there."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device: expected auto, cpu or cuda, got '{device}'")
    visible = list(range(torch.cuda.device_count())) if device != "cpu" else []
    if device == "cuda" and not visible:
        raise UserError("--device cuda: no GPU is visible to torch (torch.cuda.device_count() is 0)")
    if gpus_per_run < 1:
        raise UserError(f"--gpus-per-run: expected a positive number, got {gpus_per_run}")
    if visible and gpus_per_run > len(visible):
        raise UserError(f"--gpus-per-run {gpus_per_run}: only {len(visible)} GPU(s) visible")
    if not visible and gpus_per_run > 1:
        raise UserError(f"--gpus-per-run {gpus_per_run}: no GPU visible; on the CPU a run takes every core")
    return Resources(visible, gpus_per_run)


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


def outcome(job: Job, code: int) -> dict[str, Any]:
    """What a finished worker left: its result.json, or a record of how it died."""
    base = {"experiment": job.experiment, "run": job.run, "seed": job.seed, "differences": job.differences,
            "describe": job.describe, "config_hash": job.config_hash}  # fmt: skip
    if code == EXIT_INTERRUPTED:
        return base | {"status": "interrupted"}
    if code == EXIT_BUSY:
        return base | {"status": "busy", "error": "another process is training this run"}
    result = read_result(job.directory)
    if result is not None and result.get("config_hash") == job.config_hash:
        return result
    if code < 0:
        name = signal.Signals(-code).name
        why = f"worker killed by {name}" + (" (out of memory? the kernel's OOM killer sends it)" if code == -9 else "")
    else:
        why = f"worker exited with code {code} and wrote no result"
    result = base | {"status": "failed", "error": why, "log": _tail(job.directory / LOG)}
    write_json(job.directory / RESULT, result)
    return result


def _tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    return ""


def run_local(jobs: list[Job], res: Resources, view: SweepView) -> dict[str, dict[str, Any]]:
    """Trains the jobs in worker processes, as many at once as the GPUs allow; returns their results by label."""
    queue, free = list(jobs), list(res.gpus)
    active: dict[subprocess.Popen, tuple[Job, list[int]]] = {}
    results: dict[str, dict[str, Any]] = {}
    user_error: str | None = None
    try:
        while queue or active:
            while queue and user_error is None and (len(free) >= res.gpus_per_run if res.gpus else not active):
                job = queue.pop(0)
                take, free = free[: res.gpus_per_run], free[res.gpus_per_run :]
                job.device, job.gpus = res.device, len(take)
                job.save()
                view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
                active[start_worker(job, take if res.gpus else None)] = (job, take)
            time.sleep(0.5)
            view.refresh()
            for proc in [p for p in active if p.poll() is not None]:
                job, take = active.pop(proc)
                free += take
                results[job.label] = outcome(job, proc.returncode)
                view.finished(job, results[job.label])
                if proc.returncode == EXIT_USER_ERROR:
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


def run_in_process(jobs: list[Job], device: str, view: SweepView) -> dict[str, dict[str, Any]]:
    """Under torchrun: every rank trains each job in this process, together (see ablate.distributed)."""
    from ablate.worker import execute

    rank = int(os.environ.get("RANK", "0"))
    results = {}
    for job in jobs:
        job.device = "cuda" if device != "cpu" and cuda_available() else "cpu"
        job.gpus = int(os.environ.get("WORLD_SIZE", "1")) if job.device == "cuda" else 0
        if rank == 0:
            job.save()
            view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
        code = execute(job)
        if code == EXIT_INTERRUPTED:
            raise Interrupted()
        if rank == 0:
            results[job.label] = outcome(job, code)
            view.finished(job, results[job.label])
        if code == EXIT_USER_ERROR:
            raise UserError(results.get(job.label, {}).get("error", "bad input (see rank 0)"))
    return results


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def read_result(directory: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        return read_json(directory / RESULT)
    return None
