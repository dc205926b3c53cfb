"""Progress of a sweep: a live rich view on a terminal, plain periodic lines anywhere else (CI, log files).

The view learns how each active run is doing from its metrics.jsonl, which the worker writes, so it
works the same for local worker processes and for Slurm jobs writing to a shared directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import TimeRemainingColumn as Remaining
from rich.table import Column

from ablate.record import RunResult
from ablate.rundir import MetricsTail
from ablate.train.job import Job


@dataclass
class Active:
    """What the view knows of one running job, read from the tail of its metrics log."""

    job: Job
    total: int | None
    started: float = field(default_factory=time.monotonic)
    tail: MetricsTail | None = None
    first_step: int = 0  # where this process started: 0, or the checkpoint it resumed from
    step: int = 0
    loss: float | None = None
    tokens_per_s: float = 0.0
    valid_bleu: float | None = None
    phase: str = ""
    task: TaskID | None = None
    waiting: str | None = None  # queued, not yet running: the scheduler's reason (Slurm's squeue)

    def read(self) -> None:
        self.tail = self.tail or MetricsTail(self.job.directory)
        for record in self.tail.read():
            self.update(record)

    def update(self, record: dict[str, Any]) -> None:
        if "loss" in record:
            self.step, self.loss = record["step"], record["loss"]
            if record.get("step_ms"):
                self.tokens_per_s = (record["src_tokens"] + record["tgt_tokens"]) / record["step_ms"] * 1000
            self.phase = ""
        if "valid_bleu" in record:
            self.valid_bleu = record["valid_bleu"]
        if "phase" in record:
            self.phase = record["phase"]

    def info(self) -> str:
        if self.waiting is not None:
            return f"pending: {self.waiting}"
        parts = [f"loss {self.loss:.3f}" if self.loss is not None else "starting",
                 f"{self.tokens_per_s:,.0f} tok/s" if self.tokens_per_s else ""]  # fmt: skip
        if self.valid_bleu is not None:
            parts.append(f"valid BLEU {self.valid_bleu:.1f}")
        parts.append(self.job.device if not self.job.gpus else f"{self.job.gpus} GPU")
        if self.phase:
            parts.append(self.phase)
        return "  ".join(p for p in parts if p)


class SweepView:
    """Overall progress (runs done of total, elapsed, time left) and one line per active run."""

    def __init__(self, console: Console, jobs: list[Job], done_before: int = 0, plain_every_s: float = 30.0):
        self.console, self.plain_every_s = console, plain_every_s
        self.total_runs, self.done = len(jobs) + done_before, done_before
        self.steps = {job.label: job.spec["training"].get("max_steps") for job in jobs}
        self.active: dict[str, Active] = {}
        self.finished_steps = 0  # steps trained by this sweep in runs that have ended
        self.total_steps = sum(self.steps.values()) if all(self.steps.values()) else None
        self.started_at = self.last_plain = time.monotonic()
        self.progress: Progress | None = None
        if console.is_terminal:
            self.progress = Progress(
                TextColumn("{task.description}", table_column=Column(no_wrap=True)), BarColumn(bar_width=20),
                MofNCompleteColumn(table_column=Column(min_width=11, no_wrap=True)),
                TimeElapsedColumn(table_column=Column(min_width=7)), Remaining(table_column=Column(min_width=7)),
                TextColumn("{task.fields[info]}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
                console=console, expand=True,
            )  # fmt: skip
            self.overall = self.progress.add_task("sweep", total=self.total_steps, info=self._runs())
            self.progress.start()

    def _runs(self) -> str:
        return f"runs {self.done}/{self.total_runs}"

    def _steps_done(self) -> int:
        return self.finished_steps + sum(max(0, a.step - a.first_step) for a in self.active.values())

    def _left(self) -> str:
        """The time left, from the steps this sweep has trained so far (resumed steps not counted)."""
        done, elapsed = self._steps_done(), time.monotonic() - self.started_at
        if not self.total_steps or not done:
            return ""
        left = (self.total_steps - done) * elapsed / done / 60
        return f", about {left:.0f} min left" if left >= 1 else ", under a minute left"

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False)
        self.console.file.flush()  # a log file sees each line when it happens, not when a buffer fills

    def queued(self, job: Job, reason: str) -> None:
        """A job the scheduler holds back, and why (said again whenever the reason changes)."""
        active = self.active.get(job.label)
        if active is None:
            active = self.active[job.label] = Active(job, self.steps.get(job.label))
            if self.progress is not None:
                active.task = self.progress.add_task(f"  {job.label}", total=active.total, info="")
        if active.waiting != reason:
            active.waiting = reason
            self.say(f"{job.label}: pending: {reason}")

    def started(self, job: Job, from_step: int = 0) -> None:
        active = self.active.get(job.label)
        if active is None or active.waiting is not None:  # new, or queued until now
            if active is None:
                active = self.active[job.label] = Active(job, self.steps.get(job.label))
            active.waiting, active.first_step, active.started = None, from_step, time.monotonic()
            if self.total_steps is not None:  # a resumed job has only the rest of its steps to train
                self.total_steps -= from_step
            where = "cpu" if not job.gpus else f"{job.gpus} GPU(s)"
            if self.progress is not None:
                self.progress.update(self.overall, total=self.total_steps)
                if active.task is None:
                    active.task = self.progress.add_task(f"  {job.label}", total=active.total, info="starting")
            self.say(f"{job.label}: started on {where}{f' ({job.note})' if job.note else ''}")

    def refresh(self) -> None:
        for active in self.active.values():
            if active.waiting is None:
                active.read()
        if self.progress is not None:
            for active in self.active.values():
                self.progress.update(active.task, completed=active.step, info=active.info())
            self.progress.update(self.overall, completed=self._steps_done(), info=self._runs())
        elif time.monotonic() - self.last_plain >= self.plain_every_s:
            self.last_plain = time.monotonic()
            elapsed = time.monotonic() - self.started_at
            self.say(f"sweep: {self._runs()}, {elapsed / 60:.1f} min elapsed{self._left()}")
            for active in self.active.values():
                of = f"/{active.total}" if active.total else ""
                where = "queued" if active.waiting is not None else f"step {active.step}{of}"
                self.say(f"  {active.job.label}: {where}  {active.info()}")

    def finished(self, job: Job, result: RunResult) -> None:
        active = self.active.pop(job.label, None)
        self.done += 1
        if active is not None:
            active.read()
            self.finished_steps += max(0, active.step - active.first_step)
        if self.progress is not None:
            if active is not None:
                self.progress.remove_task(active.task)
            self.progress.update(self.overall, completed=self._steps_done(), info=self._runs())
        bleu = "  ".join(f"{split} BLEU {s.bleu:.2f}" for split, s in result.scores.items())
        error = f": {result.error}" if result.error else ""
        wall = f"  ({result.wall_seconds:.0f} s)" if result.wall_seconds is not None else ""
        self.say(f"{job.label}: {result.status}{error}  {bleu}{wall}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class Preparing:
    """Progress of preparing a corpus (ablate.data.prepared): a rich bar a stage on a terminal, a line when a stage
    ends anywhere else. `report` and `say` are what ablate.data.prepared calls."""

    def __init__(self, console: Console | None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,} pairs"),
                                 TimeElapsedColumn(), console=self.console, transient=True)  # fmt: skip
        self.stage: tuple[str, TaskID | None, int, float] | None = None

    def __enter__(self) -> Preparing:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end()
        if self.live:
            self.progress.stop()

    def report(self, what: str, done: int, total: int | None) -> None:
        if self.stage is None or self.stage[0] != what:
            self._end()
            task = self.progress.add_task(what, total=total) if self.live else None
            self.stage = (what, task, done, time.monotonic())
        what, task, _, began = self.stage
        self.stage = (what, task, done, began)
        if task is not None:
            self.progress.update(task, completed=done)

    def say(self, line: str) -> None:
        self.console.print(line, highlight=False, soft_wrap=True)

    def _end(self) -> None:
        if self.stage is not None:
            what, _, done, began = self.stage
            pairs = f": {done:,} pairs" if done else ""
            self.say(f"  corpus: {what}{pairs} ({time.monotonic() - began:.0f} s)")
            self.stage = None
