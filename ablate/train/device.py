"""The device a run trains on, named as the table's device column shows it."""

from __future__ import annotations

import platform

import torch


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU with the threads torch computes on: `cpu (x86_64, 2 threads)`."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
