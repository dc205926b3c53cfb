"""Launchers: where the prepared jobs of a sweep train. Each takes the jobs and the progress view and
returns their outcomes (one result record a job), whatever it runs them on.

    local           worker processes on this machine, pinned to GPUs or the CPU (launchers/local.py)
    torchrun        every rank of an `ablate run` started by torchrun trains each job together (torchrun.py)
    slurm           one Slurm job array through submitit (slurm.py)
    submitit-local  the same path through submitit's local executor, without a cluster

A sweep reads as plan, prepare, launch, collect (ablate.sweep.runner).
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Protocol

from ablate.record import RunResult, Status
from ablate.rundir import LOG, Exit, read_result, write_result
from ablate.sweep.progress import SweepView
from ablate.train.job import Job

LAUNCHERS = ("local", "slurm", "submitit-local")  # what --launcher takes; torchrun is chosen by being under it

Outcomes = dict[str, RunResult]  # job label -> its result record


class Interrupted(Exception):  # noqa: N818 (a stop the user asked for, not an error)
    """The sweep was stopped by the user; its workers saved checkpoints (or were left running: the message says)."""

    def __init__(self, message: str = "interrupted: checkpoints saved; to resume, run the same command again"):
        super().__init__(message)


class Launcher(Protocol):
    def describe(self) -> str:
        """Where the jobs train, for the sweep's first line."""

    def launch(self, jobs: list[Job], view: SweepView) -> Outcomes | None:
        """Trains the jobs to their end; their results by label (None: left running, collected later).

        Raises Interrupted on Ctrl-C (after the workers saved checkpoints) and UserError on bad input.
        """


def outcome(job: Job, code: int, why: str | None = None) -> RunResult:
    """What a finished worker left: its result.json, or a record of how it died (written as its result).

    `why`: what the launcher knows of a death the exit code does not tell (a Slurm time limit, say).
    """
    who = job.identity()
    if code == Exit.INTERRUPTED:
        return RunResult.of(who, status=Status.INTERRUPTED)
    if code == Exit.BUSY:
        return RunResult.of(who, status=Status.BUSY, error="another process is training this run")
    result = read_result(job.directory)
    if result is not None and result.config_hash == job.config_hash:
        return result
    if why is None and code < 0:
        name = signal.Signals(-code).name
        why = f"worker killed by {name}" + (" (out of memory? the kernel's OOM killer sends it)" if code == -9 else "")
    elif why is None:
        why = f"worker exited with code {code} and wrote no result"
    result = RunResult.of(who, status=Status.FAILED, error=why, log=_tail(job.directory / LOG))
    write_result(job.directory, result)
    return result


def _tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    return ""
