"""The training step as CUDA graphs: one a batch shape, replayed without Python or kernel launches in the loop.

A converged base run is 5.5M parameters and batches of about 1,000 tokens: on an H200 its eager step (hundreds
of kernels, each launched from Python) took 36-50 ms while the GPU's share of it is under a millisecond. A
captured step is forward, backward, gradient clipping and Adam, recorded once and replayed with one launch.

Why torch.cuda.graphs directly rather than torch.compile(mode="reduce-overhead"): the shapes are few and known
(training.shape_buckets pads every batch to a multiple of its width, two shapes a bucket: about 16 for the
converged recipe), a capture takes milliseconds where compiling a shape takes tens of seconds, and the step
stays the eager step's code, kernel for kernel, so that a graph computes what eager does.

What a captured step needs, and what this module sees to:
- static inputs: the batch is copied into tensors the graph reads (from pinned memory, without waiting), and
  the step's learning rate and target-token count are device tensors filled before each replay;
- gradients that outlive the step: the graph zeroes them in place at its start (`set_to_none` would allocate
  them inside the capture), so the trainer keeps them allocated (Trainer.update);
- Adam's state before the first capture: the first update of a process is eager, which creates it, and Adam is
  `capturable` (its step count and bias corrections on the device) with its lr a tensor;
- one memory pool for all graphs: a step's activations are freed when it ends, so the graphs share them, and a
  step's loss is copied out of the pool (`clone`) before the next replay can overwrite it.

Dropout inside a graph draws from the default CUDA generator, which torch advances by the graph's draws at each
replay, at the offsets an eager step's draws would have: on an H200 the converged recipe's baseline (bits16
dropout 0.1) had the same validation loss with and without graphs at steps 500 and 1,000, to the 4 decimals
logged. A shape outside those captured (no bucket width, several batches an update, several processes) trains
eagerly. tests/test_graphs.py checks, on CUDA, that 50 captured steps have eager's losses within bf16 round-off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ablate.data.batches import Batch

Shape = tuple[tuple[int, ...], tuple[int, ...]]  # (src shape, tgt shape)


@dataclass
class Captured:
    """One shape's graph and the tensors it reads and writes."""

    graph: torch.cuda.CUDAGraph
    src: torch.Tensor
    tgt: torch.Tensor
    loss: torch.Tensor | None  # the step's summed loss, in the graphs' pool (clone it before the next replay);
    # None until captured


class CapturedSteps:
    """The trainer's single-batch update as one CUDA graph per batch shape (see the module's docstring).

    `step(batch, total, apply)` does the work of one update on `batch` with the update's `total` target tokens
    (forward and backward, then with `apply` clipping and Adam) and returns the summed loss; called under capture
    it records the graph.
    """

    def __init__(self, device: torch.device, step: Callable[[Batch, torch.Tensor, bool], torch.Tensor]):
        self.device, self._step = device, step
        self.graphs: dict[Shape, Captured] = {}
        self.total = torch.zeros((), dtype=torch.float32, device=device)  # the update's target tokens
        self.stream = torch.cuda.Stream(device)  # every capture's
        self.pool: tuple[int, int] | None = None  # shared by every graph: one step runs at a time

    def __len__(self) -> int:
        return len(self.graphs)

    def forget(self) -> None:
        """Drops every graph: they read and write the tensors they were captured with, and loading a state dict
        gives Adam new ones (a resumed checkpoint, a budget's branch restored). The next steps capture anew."""
        self.graphs.clear()
        self.pool = None

    def update(self, batch: Batch, total: int) -> torch.Tensor:
        """One update on `batch` by replaying its shape's graph (capturing it the first time); its summed loss."""
        shape = (tuple(batch.src.shape), tuple(batch.tgt.shape))
        captured = self.graphs.get(shape)
        if captured is None:
            captured = self.graphs[shape] = self._inputs(shape)
        src, tgt = (t.pin_memory() if t.device.type == "cpu" else t for t in (batch.src, batch.tgt))
        captured.src.copy_(src, non_blocking=True)
        captured.tgt.copy_(tgt, non_blocking=True)
        self.total.fill_(float(total))
        if captured.loss is None:
            self._capture(captured)
        captured.graph.replay()
        assert captured.loss is not None
        return captured.loss.clone()  # out of the pool, which the next replay reuses

    def _inputs(self, shape: Shape) -> Captured:
        src = torch.zeros(shape[0], dtype=torch.long, device=self.device)
        tgt = torch.zeros(shape[1], dtype=torch.long, device=self.device)
        return Captured(torch.cuda.CUDAGraph(), src, tgt, None)

    def _capture(self, captured: Captured) -> None:
        """Records the graph of `captured`'s shape; before the first, one forward and backward on the capture
        stream, so that what a stream builds lazily (cuBLAS's handle and workspace) is built outside a capture.
        That warm-up changes nothing: its gradients are zeroed by the graph's start, and the generator is put
        back where it was."""
        batch = Batch(captured.src, captured.tgt, 0, 0)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        if self.pool is None:
            rng = torch.cuda.get_rng_state(self.device)
            with torch.cuda.stream(self.stream):
                self._step(batch, self.total, False)
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            torch.cuda.set_rng_state(rng, self.device)
        torch.cuda.synchronize(self.device)
        with torch.cuda.graph(captured.graph, pool=self.pool, stream=self.stream):
            captured.loss = self._step(batch, self.total, True)
        if self.pool is None:
            self.pool = captured.graph.pool()


def wanted(setting: bool | str, device: torch.device, width: int | None, world: int) -> bool:
    """training.cuda_graphs resolved: `auto` is on for a CUDA device with bucketed shapes in one process."""
    if setting == "auto":
        return device.type == "cuda" and width is not None and world == 1
    if setting and device.type != "cuda":
        raise ValueError("training.cuda_graphs: true needs a CUDA device")
    if setting and world > 1:
        raise ValueError("training.cuda_graphs: true trains in one process (DDP's all-reduce is not captured)")
    return bool(setting)
