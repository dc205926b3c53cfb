"""`ablate run --launcher slurm`: the jobs of a sweep as one Slurm job array, through submitit.

Each array task starts the same worker the local launcher starts (torchrun for several GPUs), in the
shared results directory, so a result looks the same wherever it was made, and running the same
command again (or `ablate report`) collects them. `--launcher submitit-local` goes through submitit's
local executor instead: the same path on this machine, without a cluster.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.errors import UserError
from ablate.experiment import SlurmSpec
from ablate.job import Job
from ablate.progress import SweepView

CLUSTERS = {"slurm": "slurm", "submitit-local": "local"}


def _submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UserError("--launcher slurm: needs submitit; install it with: pip install 'ablate[slurm]'") from None
    return submitit


def settings(spec: SlurmSpec, flags: dict[str, Any]) -> SlurmSpec:
    """The experiment's slurm settings with the command line's flags over them."""
    data = spec.model_dump()
    data["additional"] = data["additional"] | flags.pop("additional", {})
    try:
        return SlurmSpec.model_validate(data | flags, strict=False)
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(f"slurm settings: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def run_task(directory: str) -> int:
    """One array task: the run's worker, to its end; its exit code (see ablate.worker) is the task's result."""
    from ablate.scheduler import start_worker

    return start_worker(Job.load(Path(directory))).wait()


def submit(jobs: list[Job], settings: SlurmSpec, folder: Path, launcher: str) -> list[Any]:
    """Submits the jobs as one array; returns submitit's job handles, in order."""
    submitit = _submitit()
    executor = submitit.AutoExecutor(folder=folder, cluster=CLUSTERS[launcher])
    executor.update_parameters(
        name="ablate", timeout_min=settings.time_min, gpus_per_node=settings.gpus_per_run, tasks_per_node=1,
        cpus_per_task=settings.cpus_per_run, mem_gb=settings.mem_gb, slurm_partition=settings.partition,
        slurm_array_parallelism=settings.array_parallelism,
        slurm_additional_parameters=settings.additional or None,
    )  # fmt: skip
    for job in jobs:
        job.device, job.gpus = ("cuda", settings.gpus_per_run) if settings.gpus_per_run else ("cpu", 0)
        job.save()
    return executor.map_array(run_task, [str(job.directory) for job in jobs])


def wait(jobs: list[Job], handles: list[Any], view: SweepView) -> dict[str, dict[str, Any]]:
    """Follows the array until every task has ended; returns each job's result by label."""
    from ablate.scheduler import outcome

    pending = dict(zip(handles, jobs, strict=True))
    for job in jobs:
        view.started(job)
    results = {}
    while pending:
        time.sleep(1.0)
        view.refresh()
        for handle in [h for h in pending if h.done()]:
            job = pending.pop(handle)
            try:
                code = handle.result()
            except Exception as error:  # the task itself failed (node failure, time limit): no exit code
                code = 1
                view.say(f"{job.label}: Slurm task {handle.job_id} failed: {str(error).splitlines()[0]}")
            results[job.label] = outcome(job, code)
            view.finished(job, results[job.label])
    return results
