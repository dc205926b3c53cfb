"""Under torchrun: every rank of `ablate run` trains each job in its own process, together.

`torchrun --nnodes 2 --nproc-per-node 8 -m ablate.cli run ...` gives each job all 16 processes; rank
0 writes the results and the others follow (see ablate.train.distributed).
"""

from __future__ import annotations

from ablate.errors import UserError
from ablate.rundir import Exit, checkpoint_step
from ablate.sweep.devices import cuda_available, place
from ablate.sweep.launchers import Interrupted, Outcomes, outcome
from ablate.sweep.progress import SweepView
from ablate.train import distributed
from ablate.train.job import Job


class TorchrunLauncher:
    """Every job in this process, with every rank torchrun started."""

    def __init__(self, device: str):
        self.cuda = device != "cpu" and cuda_available()
        distributed.setup("cuda" if self.cuda else "cpu")

    def describe(self) -> str:
        return "torchrun, this process"

    def launch(self, jobs: list[Job], view: SweepView) -> Outcomes:
        from ablate.train.worker import execute  # this process trains: torch is needed anyway

        rank0 = distributed.rank() == 0
        results: Outcomes = {}
        for job in jobs:
            place(job, distributed.world_size() if self.cuda else 0)
            if rank0:
                job.save()
                view.started(job, checkpoint_step(job.directory, job.config_hash) or 0)
            code = execute(job)
            if code == Exit.INTERRUPTED:
                raise Interrupted()
            if rank0:
                results[job.label] = outcome(job, code)
                view.finished(job, results[job.label])
            if code == Exit.USER_ERROR:
                raise UserError(getattr(results.get(job.label), "error", None) or "bad input (see rank 0)")
        return results
