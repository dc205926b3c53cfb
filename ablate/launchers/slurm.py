"""The Slurm launcher: the jobs of a sweep as one Slurm job array, through submitit.

Each array task starts the same worker the local launcher starts (torchrun for several GPUs), in the
shared results directory, so a result looks the same wherever it was made, and running the same
command again (or `ablate report`) collects them. `--launcher submitit-local` goes through submitit's
local executor instead: the same path on this machine, without a cluster.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ablate.devices import place
from ablate.errors import SpecError, UserError
from ablate.job import Job
from ablate.launchers import Outcomes, outcome
from ablate.progress import SweepView

CLUSTERS = {"slurm": "slurm", "submitit-local": "local"}


class SlurmSpec(BaseModel):
    """Where and how long the jobs of `--launcher slurm` run; flags of `ablate run` override these."""

    model_config = ConfigDict(extra="forbid", strict=True)

    partition: str | None = Field(None, description="the Slurm partition")
    time_min: int = Field(240, gt=0, description="time limit of one job, in minutes")
    gpus_per_run: int = Field(1, ge=0, description="GPUs of one run (data-parallel when above 1); 0 for CPU jobs")
    cpus_per_run: int = Field(8, gt=0, description="CPU cores of one run")
    mem_gb: int | None = Field(None, gt=0, description="memory of one run")
    array_parallelism: int = Field(32, gt=0, description="jobs of the array running at once")
    additional: dict[str, Any] = Field(default_factory=dict, description="further sbatch options: {account: x}")


def settings(spec: SlurmSpec, flags: dict[str, Any]) -> SlurmSpec:
    """The experiment's slurm settings with the command line's flags over them."""
    data = spec.model_dump()
    data["additional"] = data["additional"] | flags.pop("additional", {})
    try:
        return SlurmSpec.model_validate(data | flags, strict=False)
    except ValidationError as error:
        raise SpecError.of(error, "slurm settings", SlurmSpec) from None


def _submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UserError("--launcher slurm: needs submitit; install it with: pip install 'ablate[slurm]'") from None
    return submitit


def run_task(directory: str) -> int:
    """One array task: the run's worker, to its end; its exit code (see ablate.rundir.Exit) is the task's result."""
    from ablate.launchers.local import start_worker

    return start_worker(Job.load(Path(directory))).wait()


class SlurmLauncher:
    """One job array; `wait=False` returns once it is submitted (the same command collects it later)."""

    def __init__(self, launcher: str, settings: SlurmSpec, folder: Path, wait: bool = True):
        self.cluster, self.settings, self.folder, self.wait = CLUSTERS[launcher], settings, folder, wait

    def describe(self) -> str:
        return "slurm" if self.cluster == "slurm" else "submitit-local"

    def submit(self, jobs: list[Job]) -> list[Any]:
        """Submits the jobs as one array; returns submitit's job handles, in order."""
        submitit, s = _submitit(), self.settings
        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        executor.update_parameters(
            name="ablate", timeout_min=s.time_min, gpus_per_node=s.gpus_per_run, tasks_per_node=1,
            cpus_per_task=s.cpus_per_run, mem_gb=s.mem_gb, slurm_partition=s.partition,
            slurm_array_parallelism=s.array_parallelism, slurm_additional_parameters=s.additional or None,
        )  # fmt: skip
        for job in jobs:
            place(job, s.gpus_per_run)
            job.save()
        return executor.map_array(run_task, [str(job.directory) for job in jobs])

    def launch(self, jobs: list[Job], view: SweepView) -> Outcomes | None:
        if not jobs:
            return {}
        handles = self.submit(jobs)
        view.say(f"submitted {len(handles)} job(s): {', '.join(str(h.job_id) for h in handles)}")
        if not self.wait:
            view.say("not waiting (--no-wait): once they have ended, run the same command again to collect them")
            return None
        return follow(jobs, handles, view)


def follow(jobs: list[Job], handles: list[Any], view: SweepView) -> Outcomes:
    """Follows the array until every task has ended; returns each job's result by label."""
    pending = dict(zip(handles, jobs, strict=True))
    for job in jobs:
        view.started(job)
    results: Outcomes = {}
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
