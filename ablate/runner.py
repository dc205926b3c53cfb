"""`ablate run`: plans the jobs of an experiment (run x seed), trains each in a worker process, collects results.

Running the same command again skips what is done, resumes what was interrupted from its last
checkpoint, re-runs what the spec has changed since (keeping the old result aside) and runs the rest.
Where and how the jobs train is ablate.scheduler's (or ablate.slurm's) business.

results/<experiment>/runs/<run>/seed-<n>/   one job (see ablate.job)
results/<experiment>/summary.md, summary.csv
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.experiment import Experiment
from ablate.job import RESULT, Job, RunLock, checkpoint_step, stored_hash
from ablate.progress import SweepView
from ablate.results import write_text
from ablate.scheduler import Interrupted, cuda_available, read_result, resources, run_in_process, run_local

DONE = ("completed", "diverged")  # a divergence is a result, not a failure: it is not run again


@dataclass
class Planned:
    job: Job
    action: str  # run | resume | rerun | retry | fresh | skip | busy
    detail: str = ""

    @property
    def trains(self) -> bool:
        return self.action not in ("skip", "busy")


def plan(experiment: Experiment, results: Path, seeds: int | Sequence[int] | None = None, fresh: bool = False,
         only: Sequence[str] = ()) -> list[Planned]:  # fmt: skip
    """What to do with every job of the experiment, from what its run directories hold. Reads only.

    `seeds`: a number (that many seeds from each run's training.seed on), a list, or None for the
    experiment's `seeds:` or else the run's training.seed alone.
    """
    root = results / experiment.name
    runs = [r for r in experiment.runs if not only or r.name in only]
    out = []
    for run in runs:
        first = run.spec.training.seed
        if isinstance(seeds, int):
            run_seeds = list(range(first, first + seeds))
        else:
            run_seeds = list(seeds or experiment.seeds or [first])
        out += [classify(Job.of(experiment, run, seed, root), fresh) for seed in run_seeds]
    return out


def classify(job: Job, fresh: bool) -> Planned:
    d = job.directory
    if not d.is_dir():
        return Planned(job, "run")
    lock = RunLock(d)
    if not lock.acquire(wait=False):
        return Planned(job, "busy", f"being trained by another process ({lock.holder()})")
    lock.release()
    if fresh:
        return Planned(job, "fresh", "started over (--fresh)")
    old = stored_hash(d)
    if old is not None and old != job.config_hash:
        return Planned(job, "rerun", f"the spec changed since the earlier result (config {old} -> {job.config_hash})")
    result = read_result(d)
    if result is not None and result.get("status") in DONE:
        return Planned(job, "skip", f"{result['status']} earlier")
    step = checkpoint_step(d, job.config_hash)
    if step is not None:
        return Planned(job, "resume", f"resumes from step {step}")
    if result is not None:
        return Planned(job, "retry", f"{result.get('status')} earlier: {result.get('error', '')}".rstrip(": "))
    return Planned(job, "run")


def prepare(planned: Planned) -> None:
    """Makes the run directory ready for its action: stale results set aside, leftovers cleared, job.json written."""
    job, d = planned.job, planned.job.directory
    if planned.action == "fresh":
        shutil.rmtree(d)
    elif planned.action == "rerun":
        stale = d.with_name(f"{d.name}.stale-{stored_hash(d)}")
        n = 1
        while stale.exists():
            stale, n = d.with_name(f"{d.name}.stale-{stored_hash(d)}-{n}"), n + 1
        d.rename(stale)
        job.note = f"re-run: the spec changed since the earlier result, kept in {stale.name}"
    elif planned.action == "retry":
        (d / RESULT).unlink(missing_ok=True)
    job.save()


def collect(planned: list[Planned], fresh: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The result of every job in plan order: this sweep's, or what the run directory held."""
    rows = []
    for p in planned:
        result = fresh.get(p.job.label) or read_result(p.job.directory)
        if result is None or result.get("config_hash", p.job.config_hash) != p.job.config_hash:
            resumable = checkpoint_step(p.job.directory, p.job.config_hash) is not None
            status = "running elsewhere" if p.action == "busy" else "interrupted" if resumable else "not run"
            result = {"run": p.job.run, "seed": p.job.seed, "describe": p.job.describe, "status": status}
        rows.append(result)
    return rows


Summary = tuple[list[dict[str, Any]], Any, list[str]]  # result records in plan order, the table, its notes


def write_results(experiment: Experiment, results: Path, planned: list[Planned], fresh: dict) -> Summary:
    """summary.md and summary.csv: the report's table of every job, without significance tests."""
    from ablate.report import from_records, render, report_frame

    rows = collect(planned, fresh)
    root = results / experiment.name
    frame, notes = report_frame(from_records(experiment.name, root, rows), test="none")
    title = f"{experiment.name}: {experiment.description}"
    write_text(root / "summary.md", render("md", frame, title, notes))
    write_text(root / "summary.csv", render("csv", frame, title, notes))
    return rows, frame, notes


@dataclass
class Options:
    """How `ablate run` trains a sweep (its flags)."""

    results: Path = Path("results")
    seeds: int | list[int] | None = None
    only: list[str] = field(default_factory=list)
    fresh: bool = False
    device: str | None = None  # None: training.device of the baseline spec
    gpus_per_run: int = 1
    tensorboard: Path | None = None
    launcher: str = "local"
    slurm: dict[str, Any] = field(default_factory=dict)  # flags over the experiment's slurm settings
    wait: bool = True


def sweep(experiment: Experiment, options: Options, view_console) -> Summary:
    """Plans, trains and collects one experiment; returns its records and table (none on ranks above 0)."""
    from ablate import distributed
    from ablate.experiment import SlurmSpec

    device = options.device or _device_kind(experiment.baseline.spec.training.device)
    in_process = distributed.launched()
    if in_process:
        distributed.setup("cuda" if device != "cpu" and cuda_available() else "cpu")
    planned = plan(experiment, options.results, options.seeds, options.fresh)  # every run goes in the summary
    training = [p for p in planned if p.trains and (not options.only or p.job.run in options.only)]
    rank0 = int(os.environ.get("RANK", "0")) == 0
    say = view_console.print if rank0 else (lambda *a, **k: None)
    res = resources(device, options.gpus_per_run) if options.launcher == "local" and not in_process else None
    where = res.describe() if res else options.launcher if not in_process else "torchrun, this process"
    runs = len({p.job.run for p in planned})
    say(f"{experiment.path}: {experiment.name}, {runs} runs x {len(planned) // max(runs, 1)} seed(s), "
        f"{len(training)} to train on {where} -> {options.results / experiment.name}", highlight=False)  # fmt: skip
    for p in planned:
        if p.detail and (not options.only or p.job.run in options.only):
            say(f"  {p.job.label}: {p.detail}", highlight=False)
    for p in training:
        if options.tensorboard is not None:
            p.job.tensorboard = str(options.tensorboard / experiment.name / p.job.run / f"seed-{p.job.seed}")
    if rank0:
        prepare_data([p.job for p in training])
        for p in training:
            prepare(p)
    if in_process:
        distributed.barrier()
    jobs = [p.job for p in training]
    selected = [p for p in planned if not options.only or p.job.run in options.only]
    view = SweepView(view_console, jobs, done_before=len(selected) - len(training)) if rank0 else _Silent()
    fresh_results: dict[str, dict[str, Any]] = {}
    try:
        if in_process:
            fresh_results = run_in_process(jobs, device, view)
        elif options.launcher == "local":
            fresh_results = run_local(jobs, res, view)
        elif jobs:
            from ablate import slurm

            settings = slurm.settings(experiment.slurm or SlurmSpec(), options.slurm)
            handles = slurm.submit(jobs, settings, options.results / experiment.name / "slurm", options.launcher)
            say(f"submitted {len(handles)} job(s): {', '.join(str(h.job_id) for h in handles)}", highlight=False)
            if not options.wait:
                say("not waiting (--no-wait): once they have ended, run the same command again to collect them")
                return [], None, []
            fresh_results = slurm.wait(jobs, handles, view)
    except Interrupted:
        view.close()
        if rank0:
            write_results(experiment, options.results, planned, fresh_results)
        raise
    finally:
        view.close()
    if not rank0:
        return [], None, []
    return write_results(experiment, options.results, planned, fresh_results)


def prepare_data(jobs: list[Job]) -> None:
    """Checks each corpus (downloading what is missing) and trains each vocabulary once, before any worker."""
    from ablate.data.dataset import load_dataset

    prepared = set()
    for job in jobs:
        spec = job.run_spec()
        key = (spec.data.model_dump_json(), spec.tokenizer.model_dump_json())
        if key not in prepared:
            prepared.add(key)
            load_dataset(spec.data, spec.tokenizer)


class _Silent:
    """The view of ranks other than 0: they train, rank 0 reports."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else device
