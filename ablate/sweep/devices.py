"""Where jobs train: the one place that decides a job's device, its GPUs, or its CPU cores and threads.

`ablate run --device auto|cpu|cuda --gpus-per-run K --runs-per-gpu R --threads-per-run T` becomes
`Resources`: the GPUs this sweep may hand out, how many each run takes and how many runs may share one, or
on the CPU the cores it may pin runs to and how many threads (one core each) a run takes. A launcher asks
`place` to record on a job what it was given.
Torch is imported only to count GPUs.

On the CPU, runs side by side on disjoint cores train more runs an hour than one run at a time on every
core, because a run's speed grows less than linearly with its threads (benchmarks/sweep.py measures
it). So by default a sweep of J jobs on C cores runs min(J, C) at once, each on C // min(J, C) cores.
"""

from __future__ import annotations

import os
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
    runs_per_gpu: int = 1  # jobs that may share one GPU (with gpus_per_run 1): small models leave a GPU idle
    cpus: list[int] = field(default_factory=list)  # CPU cores to pin runs to (no GPUs); none: unpinned, one at a time
    threads_per_run: int | None = None  # a CPU run's threads and cores; None: every core
    why: str = ""  # how threads_per_run was chosen, for the plan's first line

    def __post_init__(self) -> None:
        if self.runs_per_gpu > 1 and self.gpus_per_run > 1:
            raise ValueError("runs_per_gpu > 1 needs gpus_per_run 1: a data-parallel run takes its GPUs whole")

    @property
    def parallel(self) -> int:
        """Jobs that train at once: one per K GPUs (R a GPU with --runs-per-gpu R), or on the CPU one per
        `threads_per_run` cores."""
        if self.gpus:
            return max(1, len(self.gpus) // self.gpus_per_run) * self.runs_per_gpu
        return max(1, len(self.cpus) // self.threads_per_run) if self.cpus and self.threads_per_run else 1

    def describe(self) -> str:
        if self.gpus:
            shared = f", {self.runs_per_gpu} runs a GPU" if self.runs_per_gpu > 1 else ""
            if self.runs_per_gpu > 1 and self.threads_per_run:
                shared += f" ({self.threads_per_run} CPU thread(s) each)"
            at_once = f"{self.parallel} run(s) at once"
            return f"{len(self.gpus)} GPU(s) {self.gpus}, {self.gpus_per_run} a run{shared}, {at_once}"
        if not self.cpus:
            return "CPU, one run at a time"
        threads = self.threads_per_run or len(self.cpus)
        runs = "one run at a time" if self.parallel == 1 else f"{self.parallel} runs at once"
        cores = "1 core" if len(self.cpus) == 1 else f"{len(self.cpus)} cores"
        return f"CPU ({cores}), {runs}, {threads} thread(s) each" + (f" ({self.why})" if self.why else "")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def visible_gpus() -> list[int]:
    """The GPUs torch sees, by its index (0, 1, ...: under CUDA_VISIBLE_DEVICES=2,3 these are 0 and 1)."""
    import torch

    return list(range(torch.cuda.device_count()))


def visible_devices(gpu_ids: list[int], outer: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a worker given `gpu_ids` (torch's indices in the sweep's process): the entries
    of the sweep's own CUDA_VISIBLE_DEVICES (`outer`) at those indices, else the indices themselves. Under
    `CUDA_VISIBLE_DEVICES=2,3 ablate run ...` a job given index 1 must see physical GPU 3, not GPU 1."""
    entries = [e.strip() for e in outer.split(",")] if outer else []
    return ",".join(entries[i] if i < len(entries) else str(i) for i in gpu_ids)


def device_kind(device: str) -> str:
    """The spec's training.device (auto, cpu, cuda, cuda:N) as a sweep's --device: auto, cpu or cuda."""
    return "cuda" if device.startswith("cuda") else device


def usable_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity: what a container or `taskset` allows)."""
    return sorted(os.sched_getaffinity(0))


def default_threads(jobs: int, cores: int) -> int:
    """The threads a CPU run takes when not told: as many runs side by side as there are jobs, up to a core each."""
    return max(1, cores // max(1, min(jobs, cores)))


def resources(device: str, gpus_per_run: int, visible: list[int] | None = None, threads_per_run: int | None = None,
              jobs: int = 1, cores: list[int] | None = None, runs_per_gpu: int = 1) -> Resources:  # fmt: skip
    """`device` auto (every visible GPU, else the CPU), cpu or cuda, checked against the GPUs there are;
    `runs_per_gpu` jobs may share each GPU (one GPU a job).

    `visible`: the GPUs to hand out; by default those torch sees. On the CPU, `cores` (default: this
    process's) are handed out `threads_per_run` at a time; by default OMP_NUM_THREADS when it is set, else
    `default_threads` for `jobs` jobs.
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
        raise UserError(f"--gpus-per-run {gpus_per_run}: no GPU visible; on the CPU use --threads-per-run")
    if runs_per_gpu < 1:
        raise UserError(f"--runs-per-gpu: expected a positive number, got {runs_per_gpu}")
    if runs_per_gpu > 1 and gpus_per_run > 1:
        raise UserError(f"--runs-per-gpu {runs_per_gpu}: only with one GPU a run (a data-parallel run of "
                        f"--gpus-per-run {gpus_per_run} takes its GPUs whole)")  # fmt: skip
    if runs_per_gpu > 1 and not gpus:
        why = "the sweep trains on the CPU (--device cpu)" if device == "cpu" else "no GPU visible"
        raise UserError(f"--runs-per-gpu {runs_per_gpu}: {why}; on the CPU use --threads-per-run")
    if gpus and runs_per_gpu > 1:  # the CPU's cores shared out too: torch would give each of R·G runs every core
        parallel = len(gpus) * runs_per_gpu
        threads = max(1, len(usable_cores() if cores is None else cores) // parallel)
        return Resources(list(gpus), gpus_per_run, runs_per_gpu=runs_per_gpu, threads_per_run=threads)
    if gpus:
        return Resources(list(gpus), gpus_per_run)
    cores = usable_cores() if cores is None else list(cores)
    if threads_per_run is not None and not 1 <= threads_per_run <= len(cores):
        raise UserError(f"--threads-per-run: expected 1 to {len(cores)} (the cores this process may use), "
                        f"got {threads_per_run}")  # fmt: skip
    if threads_per_run is not None:
        return Resources([], gpus_per_run, cpus=cores, threads_per_run=threads_per_run, why="--threads-per-run")
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:  # the user's own thread count, as torch would have taken it
        threads = min(int(omp), len(cores))
        return Resources([], gpus_per_run, cpus=cores, threads_per_run=threads, why="OMP_NUM_THREADS")
    threads = default_threads(jobs, len(cores))
    why = ("the most runs an hour for this sweep; --threads-per-run K chooses" if threads < len(cores)
           else "every core for one run" if jobs <= 1 else "")  # fmt: skip
    return Resources([], gpus_per_run, cpus=cores, threads_per_run=threads, why=why)


def emulated_bf16(jobs: list[Job], resources: Resources) -> str | None:
    """A note, before training, when a spec forces bf16 on a CPU that only emulates it: how it is computed there
    and at what speed against fp32."""
    forced = [job.label for job in jobs if job.spec["training"]["precision"] == "bf16"]
    if resources.gpus or not forced:
        return None
    import torch

    from ablate.train.device import cpu_isa, cpu_model, native_bf16
    from ablate.train.flops import peak_flops

    if native_bf16():
        return None
    cpu, threads = torch.device("cpu"), resources.threads_per_run or None
    ratio = peak_flops(cpu, "bf16", threads) / peak_flops(cpu, "fp32", threads)  # timed matmuls, cached a machine
    runs = ", ".join(forced[:3]) + (f" and {len(forced) - 3} more" if len(forced) > 3 else "")
    return (
        f"note: {runs} force training.precision bf16 on a CPU without native bf16 ({cpu_model()}, "
        f"{cpu_isa()}): its matmuls are emulated, bf16 operands and products summed in fp32 by fp32 kernels, "
        f"at {ratio:.2f} times fp32's matmul speed here; precision auto (fp32 on this CPU) skips the rounding"
    )


def place(job: Job, gpus: int, gpu_ids: list[int] | None = None, device: str = "cuda",
          cpu_ids: list[int] | None = None, runs_per_gpu: int = 1, threads: int | None = None) -> None:  # fmt: skip
    """Records where a job trains: on `gpus` GPUs (`gpu_ids` among the visible ones, when known), which up to
    `runs_per_gpu` - 1 other jobs may share, with `threads` CPU threads when given; or the CPU, pinned to
    `cpu_ids` with one thread a core when given."""
    job.device = device if gpus else "cpu"
    job.gpus = gpus
    job.gpu_ids = list(gpu_ids or [])
    job.runs_per_gpu = runs_per_gpu if gpus else 1
    job.cpu_ids = list(cpu_ids or [])
    if cpu_ids:
        job.threads = len(cpu_ids)
    elif gpus and threads:
        job.threads = threads
