"""Where a run trains: its placement (device, precision, threads, rank) resolved once, the device named as the
table's device column shows it, and how much of it the run had."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Placement:
    """Where one process of a job computes, resolved once, by the worker: the device, the precision `auto` means
    there, the CPU threads and the process's rank. The pipeline and the trainer read it and decide none of it."""

    device: torch.device
    precision: str  # fp32 or bf16: never auto
    threads: int | None = None  # torch.set_num_threads; None: torch's default, every core
    rank: int = 0
    world: int = 1

    @classmethod
    def of(cls, device: str, local_rank: int, precision: str, threads: int | None, rank: int = 0,
           world: int = 1) -> Placement:  # fmt: skip
        """`device` (cpu or cuda) and `precision` (training.precision: auto, fp32, bf16) as this process has them."""
        where = torch.device(f"cuda:{local_rank}" if device == "cuda" else "cpu")
        return cls(where, resolve_precision(where, precision), threads, rank, world)

    def enter(self) -> None:
        """Makes this process compute here: its thread count (kernels, hence round-off, depend on it: references
        pin it) and its GPU."""
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)


def resolve_precision(device: torch.device, precision: str) -> str:
    """What `training.precision` means on this device: auto is bf16 on CUDA and on CPUs with native bf16."""
    if precision != "auto":
        return precision
    return "bf16" if device.type == "cuda" or native_bf16() else "fp32"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model, vector ISA and bf16, with the threads torch computes on:
    `AMD EPYC 9R14 (AVX-512, native bf16), 1 thread`. The machines a project runs on differ; a table says which."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return f"{cpu_model()} ({cpu_isa()}, {'native' if native_bf16() else 'emulated'} bf16), {threads} " + (
        "thread" if threads == 1 else "threads")  # fmt: skip


def native_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX-512 BF16 or AMX), as torch reports it."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def _cpuinfo(key: str) -> str | None:
    """The first value of `key` in /proc/cpuinfo (Linux), e.g. `model name` or `flags`."""
    with contextlib.suppress(OSError, StopIteration):
        line = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.split(":")[0].strip() == key)
        return line.split(":", 1)[1].strip()
    return None


def cpu_model() -> str:
    """The CPU's model name (`AMD EPYC 9R14`, `Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz`)."""
    return " ".join((_cpuinfo("model name") or platform.processor() or platform.machine()).split())


def cpu_isa() -> str:
    """The widest vector ISA the CPU offers, which decides the kernels torch runs: AVX-512, AVX2 or the machine."""
    flags = set((_cpuinfo("flags") or "").split())
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else platform.machine()


def cores_busy_seconds(cores: Iterable[int]) -> float | None:
    """Seconds the given cores spent running anything since boot, guests' steal included (Linux's /proc/stat)."""
    wanted = {f"cpu{c}" for c in cores}
    busy = 0
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name in wanted:  # user nice system idle iowait irq softirq steal ...
                values = list(map(int, fields))
                busy += values[0] + values[1] + values[2] + sum(values[5:8])
    except (OSError, ValueError):
        return None
    return busy / os.sysconf("SC_CLK_TCK")


class CoreShare:
    """How much of its cores a process had between `start` and `stop`: 1 minus the share other processes ran on them.

    A run's speed figures are its own only when no one else ran on its cores; on a machine shared with the test
    suite or another sweep they measure the machine. (The process's own CPU seconds over wall time would not
    tell: OpenMP threads idle while Python works, alone or not.)
    """

    def __init__(self, cores: Iterable[int] | None = None):
        self.cores = sorted(cores) if cores else sorted(os.sched_getaffinity(0))
        self.start()

    def start(self) -> None:
        self.busy, self.own, self.wall = cores_busy_seconds(self.cores), time.process_time(), time.perf_counter()

    def stop(self) -> float | None:
        """The share, from 0 to 1, of the cores' time left to this process (None where /proc/stat is not there)."""
        busy = cores_busy_seconds(self.cores)
        wall = time.perf_counter() - self.wall
        if busy is None or self.busy is None or wall <= 0:
            return None
        others = (busy - self.busy) - (time.process_time() - self.own)
        with contextlib.suppress(ZeroDivisionError):
            return round(min(1.0, max(0.0, 1 - others / (wall * len(self.cores)))), 3)
        return None
