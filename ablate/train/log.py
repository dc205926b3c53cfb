"""A run's log: metrics.jsonl and diagnostics.jsonl (ablate.rundir), TensorBoard scalars, a plain progress line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ablate.rundir import DIAGNOSTICS, append_metrics
from ablate.train.steps import Progress


class Log:
    """The run's metrics (metrics.jsonl), optionally TensorBoard scalars, and a plain progress line every 30 s.

    `directory` None: a rank other than 0, which logs nothing.
    """

    def __init__(self, directory: Path | None, tensorboard: str | None, resumed: int | None, every_s: float = 30.0):
        self.directory, self.every_s, self.last = directory, every_s, time.monotonic()
        self.last_diagnosed: int | None = None  # the step of the last diagnostics record written
        self.writer = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard extra; checked by the CLI

            self.writer = SummaryWriter(tensorboard, purge_step=None if resumed is None else resumed + 1)

    def diagnostics(self, step: int, measured: dict[str, Any]) -> None:
        """Appends the diagnostics of the model at `step` (ablate.model.diagnostics.measure) to diagnostics.jsonl."""
        self.last_diagnosed = step
        if self.directory is not None:
            append_metrics(self.directory, {"step": step} | measured, DIAGNOSTICS)

    def write(self, record: dict[str, Any]) -> None:
        if self.directory is None:
            return
        append_metrics(self.directory, record)
        if self.writer is not None and "step" in record:
            for key in ("loss", "lr", "valid_loss", "valid_ppl", "valid_bleu"):
                if key in record:
                    tag = key.replace("valid_", "valid/") if key.startswith("valid") else f"train/{key}"
                    self.writer.add_scalar(tag, record[key], record["step"])

    def progress(self, p: Progress, total: int | None) -> None:
        if self.directory is not None and time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            rate = (p.src_tokens + p.tgt_tokens) / p.step_seconds if p.step_seconds else 0.0
            self.say(f"step {p.step}{f'/{total}' if total else ''}  loss {p.loss:.3f}  {rate:,.0f} tok/s")

    def phase(self, what: str, said: str | None = None) -> None:
        """A phase of the job (decoding, a cooldown branch) recorded in metrics.jsonl, and printed (as `said`)."""
        self.say(said or what)
        self.write({"phase": what})

    def say(self, text: str) -> None:
        if self.directory is not None:
            print(text, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
