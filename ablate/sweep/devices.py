"""Where jobs train: the one place that decides a job's device and GPUs.

`ablate run --device auto|cpu|cuda --gpus-per-run K` becomes `Resources`: the GPUs this sweep may hand
out (none: the CPU) and how many each run takes. A launcher asks `place` to record on a job what it
was given. Torch is imported only to count GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ablate.errors import UserError
from ablate.train.job import Job

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class Resources:
    """The GPUs a sweep may use (their indices, as CUDA_VISIBLE_DEVICES names them) and how many a run takes.

    `device` is what a worker given GPUs trains on: cuda, except in tests, which hand out GPUs that
    are not there to workers that train on the CPU, to watch the scheduling.
    """

    gpus: list[int] = field(default_factory=list)
    gpus_per_run: int = 1
    device: str = "cuda"

    @property
    def parallel(self) -> int:
        """Jobs that train at once: one per K GPUs, or one on the CPU (it takes every core)."""
        return max(1, len(self.gpus) // self.gpus_per_run) if self.gpus else 1

    def describe(self) -> str:
        if not self.gpus:
            return "CPU, one run at a time"
        return f"{len(self.gpus)} GPU(s) {self.gpus}, {self.gpus_per_run} a run, {self.parallel} run(s) at once"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def visible_gpus() -> list[int]:
    import torch

    return list(range(torch.cuda.device_count()))


def device_kind(device: str) -> str:
    """The spec's training.device (auto, cpu, cuda, cuda:N) as a sweep's --device: auto, cpu or cuda."""
    return "cuda" if device.startswith("cuda") else device


def resources(device: str, gpus_per_run: int, visible: list[int] | None = None) -> Resources:
    """`device` auto (every visible GPU, else the CPU), cpu or cuda, checked against the GPUs there are.

    `visible`: the GPUs to hand out; by default those torch sees.
    """
    if device not in DEVICES:
        raise UserError(f"--device: expected auto, cpu or cuda, got '{device}'")
    if gpus_per_run < 1:
        raise UserError(f"--gpus-per-run: expected a positive number, got {gpus_per_run}")
    gpus = [] if device == "cpu" else visible if visible is not None else visible_gpus()
    if device == "cuda" and not gpus:
        raise UserError("--device cuda: no GPU is visible to torch (torch.cuda.device_count() is 0)")
    if gpus and gpus_per_run > len(gpus):
        raise UserError(f"--gpus-per-run {gpus_per_run}: only {len(gpus)} GPU(s) visible")
    if not gpus and gpus_per_run > 1:
        raise UserError(f"--gpus-per-run {gpus_per_run}: no GPU visible; on the CPU a run takes every core")
    return Resources(list(gpus), gpus_per_run)


def place(job: Job, gpus: int, gpu_ids: list[int] | None = None, device: str = "cuda") -> None:
    """Records where a job trains: on `gpus` GPUs (`gpu_ids` among the visible ones, when known), or the CPU."""
    job.device = device if gpus else "cpu"
    job.gpus = gpus
    job.gpu_ids = list(gpu_ids or [])
