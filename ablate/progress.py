"""Progress of long work: a live rich bar on a terminal, plain periodic lines anywhere else (CI, logs)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class Reporter:
    """Receives what a run reports and shows it."""

    def __init__(self, console: Console, plain_every_s: float = 30.0):
        self.console = console
        self.live = console.is_terminal
        self.plain_every_s = plain_every_s
        self.progress: Progress | None = None
        self.task = None
        self.label = ""
        self.total: int | None = None
        self.last_plain = 0.0
        self.extra = ""

    def say(self, text: str) -> None:
        self.console.print(text)
        self.console.file.flush()  # a log file sees each line when it happens, not when a buffer fills

    def start_run(self, label: str, total_steps: int | None) -> None:
        self.label, self.total, self.extra = label, total_steps, ""
        self.last_plain = time.monotonic()
        if self.live:
            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=True,
            )  # fmt: skip
            self.progress.start()
            self.task = self.progress.add_task(label, total=total_steps, info="")
        else:
            self.say(f"{label}: training" + (f" for {total_steps} steps" if total_steps else ""))

    def step(self, step: int, loss: float, tokens_per_s: float) -> None:
        info = f"loss {loss:.3f}  {tokens_per_s:,.0f} tok/s{self.extra}"
        if self.progress is not None:
            self.progress.update(self.task, completed=step, info=info)
        elif time.monotonic() - self.last_plain >= self.plain_every_s:
            self.last_plain = time.monotonic()
            of = f"/{self.total}" if self.total else ""
            self.say(f"{self.label}: step {step}{of}  {info}")

    def validated(self, record: dict[str, Any]) -> None:
        bleu = f"  valid BLEU {record['valid_bleu']:.1f}" if "valid_bleu" in record else ""
        self.extra = f"  valid loss {record['valid_loss']:.3f}{bleu}"
        if self.progress is None:
            self.say(f"{self.label}: step {record['step']}{self.extra}")

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, info=text)
        else:
            self.say(f"{self.label}: {text}")

    def end_run(self, result: dict[str, Any]) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        scores = result.get("scores") or {}
        bleu = ", ".join(f"{split} BLEU {s['bleu']:.2f}" for split, s in scores.items())
        error = f": {result['error']}" if result.get("error") else ""
        self.say(f"{self.label}: {result['status']}{error}  {bleu}  ({result['wall_seconds']:.0f} s)")
