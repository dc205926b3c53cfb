"""What a sweep would do with each job (run, resume, re-run, skip...), read from its run directory alone.

A job whose spec and seed (its config hash) finished anywhere under the results root, or trains
earlier in the same plan, is reused rather than trained again (`--fresh` trains it). A finished job whose spec
changed in its decoding alone (beam, length penalty, test splits: rundir.DECODING) is decoded again from its last
checkpoint rather than retrained.

`ablate run` acts on the plan; `--dry-run` prints it, with each job's size: parameters at the nominal
vocabulary, tokens a step and steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ablate.rundir import (
    RunLock,
    checkpoint_step,
    config_hash,
    decoding_changes,
    finished_jobs,
    job_dir,
    read_result,
    stored_hash,
    training_goes_on,
)
from ablate.sweep.experiment import Experiment, Run
from ablate.train.job import Job


class Action(str, Enum):
    RUN = "run"
    RESUME = "resume"  # from its last checkpoint
    RERUN = "rerun"  # the spec changed: the earlier result is set aside
    REDECODE = "redecode"  # only the decoding changed: the earlier result is set aside, the trained weights decoded
    RETRY = "retry"  # failed earlier
    FRESH = "fresh"  # --fresh: deleted and started over
    SKIP = "skip"  # completed or diverged earlier
    BUSY = "busy"  # another process is training it
    REUSE = "reuse"  # the same spec and seed finished elsewhere (or trains earlier in this sweep): copied

    def __str__(self) -> str:
        return self.value


@dataclass
class Planned:
    job: Job
    action: Action
    detail: str = ""
    source: Path | None = None  # REUSE: the job directory whose result is copied

    @property
    def trains(self) -> bool:
        return self.action not in (Action.SKIP, Action.BUSY, Action.REUSE)


def plan(experiment: Experiment, results: Path, seeds: int | Sequence[int] | Mapping[str, Sequence[int]] | None = None,
         fresh: bool = False, only: Sequence[str] = ()) -> list[Planned]:  # fmt: skip
    """What to do with every job of the experiment, from what its run directories hold. Reads only.

    `seeds`: a number (that many seeds from each run's training.seed on), a list, a list for each run (a
    sequential design's, ablate.sweep.sequential), or None for the experiment's `seeds:` or else the run's
    training.seed alone.
    """
    root = results / experiment.name
    runs = [r for r in experiment.runs if not only or r.name in only or r.arm in only]
    finished = {} if fresh else finished_jobs(results)
    out: list[Planned] = []
    for run in runs:
        first = run.spec.training.seed
        if isinstance(seeds, int):
            run_seeds = list(range(first, first + seeds))
        elif isinstance(seeds, Mapping):
            run_seeds = list(seeds[run.name])
        else:
            run_seeds = list(seeds or experiment.seeds or [first])
        for seed in run_seeds:
            planned = classify(job_of(experiment, run, seed, root), fresh)
            out.append(_reused(planned, finished, results, out))
    return out


def job_of(experiment: Experiment, run: Run, seed: int, root: Path, threads: int | None = None) -> Job:
    """The job of one run with one seed, in root/runs/<run>/seed-<seed>; `threads` pins its CPU threads (a
    reference of `ablate check` does), which its launcher otherwise chooses."""
    spec = run.spec.model_copy(update={"training": run.spec.training.model_copy(update={"seed": seed})})
    data = spec.model_dump(mode="json")
    return Job(
        experiment.name,
        run.name,
        seed,
        job_dir(root, run.name, seed),
        data,
        run.differences,
        run.describe(),
        experiment.plugins,
        config_hash(data),
        arm=run.arm or run.name,
        lr=run.lr,
        threads=threads,
    )


def _reused(planned: Planned, finished: dict[str, Path], results: Path, earlier: list[Planned]) -> Planned:
    """REUSE instead of training, when the same spec and seed finished elsewhere or trains earlier in this plan."""
    job = planned.job
    if planned.action not in (Action.RUN, Action.RETRY, Action.RERUN, Action.FRESH):
        return planned
    source = finished.get(job.config_hash) if planned.action != Action.FRESH else None
    if source is not None and source != job.directory:
        where = source.relative_to(results) if source.is_relative_to(results) else source
        return Planned(job, Action.REUSE, f"the same spec and seed finished as {where}: its result is copied", source)
    for other in earlier:
        if other.trains and other.job.config_hash == job.config_hash:
            return Planned(job, Action.REUSE, f"the same spec and seed as {other.job.label}: its result is copied",
                           other.job.directory)  # fmt: skip
    return planned


def classify(job: Job, fresh: bool) -> Planned:
    d = job.directory
    if not d.is_dir():
        return Planned(job, Action.RUN)
    lock = RunLock(d)
    if not lock.acquire(wait=False):
        return Planned(job, Action.BUSY, f"being trained by another process ({lock.holder()})")
    lock.release()
    if fresh:
        return Planned(job, Action.FRESH, "started over (--fresh)")
    old = stored_hash(d)
    if old is not None and old != job.config_hash:
        changed = decoding_changes(d, job.spec)
        if changed is not None:
            why = (f"only the decoding changed ({', '.join(changed)}): its trained weights are decoded again "
                   f"(config {old} -> {job.config_hash})")  # fmt: skip
            return Planned(job, Action.REDECODE, why)
        going_on = training_goes_on(d, job.spec)
        if going_on is not None:
            changed, step = going_on
            why = (f"only the decoding changed ({', '.join(changed)}): resumes from step {step} under the new config "
                   f"({old} -> {job.config_hash})")  # fmt: skip
            return Planned(job, Action.RESUME, why)
        step = checkpoint_step(d, job.config_hash)
        if step is not None:  # a decoding again, or a resume under the new config, cut short after last.json took it
            return Planned(job, Action.RESUME, f"resumes from step {step}")
        why = f"the spec changed since the earlier result (config {old} -> {job.config_hash})"
        return Planned(job, Action.RERUN, why)
    result = read_result(d)
    if result is not None and result.finished:
        return Planned(job, Action.SKIP, f"{result.status} earlier")
    step = checkpoint_step(d, job.config_hash)
    if step is not None:
        return Planned(job, Action.RESUME, f"resumes from step {step}")
    if result is not None:
        return Planned(job, Action.RETRY, f"{result.status} earlier: {result.error or ''}".rstrip(": "))
    return Planned(job, Action.RUN)


DRY_RUN_COLUMNS = ("run", "seed", "differs from the baseline", "params", "tokens a step", "steps", "would")


def dry_run_rows(experiment: Experiment, planned: list[Planned]) -> list[tuple[str, ...]]:
    """One row a planned job, in DRY_RUN_COLUMNS: its size and what running now would do."""
    from ablate.model.transformer import parameter_count  # builds each model on the meta device: no memory

    rows = []
    for p in planned:
        spec = experiment.run(p.job.run).spec
        vocab = spec.tokenizer.nominal_size
        training = spec.training
        tokens = (f"~{training.batch_tokens:,} target" if training.batch_tokens
                  else f"<= {training.max_tokens:,} a side")  # fmt: skip
        steps = f"{training.max_steps:,}" if training.max_steps else f"{training.max_epochs} epochs"
        action = str(p.action) + (f": {p.detail}" if p.detail else "")
        rows.append((p.job.run, str(p.job.seed), p.job.describe, f"{parameter_count(spec.model, vocab, vocab):,}",
                     tokens, steps, action))  # fmt: skip
    return rows


def validation_table(experiment: Experiment) -> Any:
    """`ablate validate`: each run, how it differs from the baseline, and its parameters at the nominal vocabulary."""
    from rich.table import Table

    from ablate.model.transformer import parameter_count

    table = Table(title=f"{experiment.path}: {experiment.name} ({len(experiment.runs)} runs)", title_justify="left")
    table.add_column("run")
    table.add_column("differs from the baseline")
    table.add_column("params", justify="right")
    for run in experiment.runs:
        vocab = run.spec.tokenizer.nominal_size
        table.add_row(run.name, run.describe(), f"{parameter_count(run.spec.model, vocab, vocab):,}")
    return table
