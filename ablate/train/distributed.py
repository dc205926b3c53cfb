"""Data-parallel training across processes: torch.distributed, started by `torchrun` or by the runner.

One run's processes share each optimizer update: every rank builds the same list of updates from
(seed, epoch), takes its slice of every batch, and DistributedDataParallel averages the gradients over the
ranks (the trainer scales each rank's loss by the world size, so the update is the global batch's sum). The
global batch is what the spec says, whatever the number of processes.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def launched() -> bool:
    """True inside a process started by torchrun (or anything else that sets its environment variables)."""
    return world_size() > 1


def rank() -> int:
    """This process's rank among all of the run's processes (0 without torchrun)."""
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """How many processes train the run together (1 without torchrun)."""
    return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))


def setup(device_type: str) -> tuple[int, int, int]:
    """Joins the process group (NCCL on GPUs, gloo on the CPU); returns (rank, world size, local rank)."""
    if not launched():
        return 0, 1, 0
    backend = "nccl" if device_type == "cuda" else "gloo"
    if not dist.is_initialized():
        # long enough for rank 0 to decode the test set while the others wait at a barrier
        dist.init_process_group(backend, timeout=timedelta(minutes=60))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cpu":  # the processes of a CPU run share its cores
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    return dist.get_rank(), dist.get_world_size(), local_rank


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_sum(value: torch.Tensor) -> torch.Tensor:
    """The sum over ranks (in place); the tensor itself in a single process."""
    if dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when it is true on any: ranks must agree before they stop."""
    if not dist.is_initialized():
        return flag
    t = torch.tensor(float(flag), device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
