"""`ablate run`: a sweep reads as plan, prepare, launch, collect.

plan      what each job (run x seed) needs, from its run directory (ablate.sweep.plan)
prepare   corpora checked, vocabularies trained once, run directories made ready, job.json written
launch    a launcher trains the jobs (ablate.sweep.launchers: local processes, torchrun, Slurm)
collect   every job's result, this sweep's or an earlier one's, in summary.md and summary.csv

A job that another experiment (or this one) already trained with the same spec and seed is copied,
not trained (ablate.sweep.plan's REUSE); `--fresh` trains it again.

Running the same command again skips what is done, resumes what was interrupted from its last
checkpoint, re-runs what the spec has changed since (keeping the old result aside) and runs the rest.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.errors import UserError, did_you_mean
from ablate.files import write_text
from ablate.record import RunResult, Status
from ablate.report.command import after_run
from ablate.rundir import (
    JOB,
    RESULT,
    RUNS,
    SUMMARY_CSV,
    SUMMARY_MD,
    Exit,
    adopt_checkpoint,
    checkpoint_step,
    read_result,
    reuse,
    run_dirs,
    seed_dirs,
    set_aside_for_decoding,
    stale_path,
    stored_hash,
    training_goes_on,
    truncate_metrics,
)
from ablate.sweep.design import declare
from ablate.sweep.devices import Resources, device_kind, emulated_bf16, resources
from ablate.sweep.experiment import Experiment
from ablate.sweep.launchers import Interrupted, Launcher, Outcomes
from ablate.sweep.launchers.local import LocalLauncher
from ablate.sweep.plan import Action, Planned, plan
from ablate.sweep.progress import SweepView
from ablate.terminal import say
from ablate.train import distributed
from ablate.train.job import Job


@dataclass
class Options:
    """How `ablate run` trains a sweep (its flags)."""

    results: Path = Path("results")
    seeds: int | list[int] | dict[str, list[int]] | None = None  # a dict: each run's own (a sequential design)
    only: list[str] = field(default_factory=list)
    fresh: bool = False
    device: str | None = None  # None: training.device of the baseline spec
    gpus_per_run: int | None = None  # None: 1 locally; with Slurm, what the spec's device and the cluster say
    threads_per_run: int | None = None  # on the CPU; None: as many runs side by side as the jobs and cores allow
    tensorboard: Path | None = None
    launcher: str = "local"
    slurm: dict[str, Any] = field(default_factory=dict)  # flags over the experiment's slurm settings
    wait: bool = True
    margin: float | None = None  # --margin: over the experiment's, for design.json (ablate.sweep.design)
    max_seeds: int | None = None  # --until-decided's --max-seeds (ablate.sweep.sequential)
    runs_per_gpu: int = 1  # jobs that may share one GPU, locally (ablate.sweep.devices)


Summary = tuple[list[RunResult], Any, list[str]]  # result records in plan order, the table, its notes


SweepOne = Callable[[Experiment, Options, Any], Summary]  # sweep, or ablate.sweep.sequential.until_decided


def run(experiments: list[Experiment], options: Options, console, sweep_one: SweepOne | None = None) -> int:
    """`ablate run`: each experiment's design declared (design.json), its sweep (`sweep_one`, default `sweep`), then
    its table; the exit code (0 all done, 1 some runs failed, 130 interrupted: the same command resumes)."""
    try:
        return _run(experiments, options, console, sweep_one or sweep)
    finally:
        # Under torchrun, the process group is closed before the interpreter exits: a rank that left with gloo's
        # threads still running could abort at exit ("terminate called without an active exception").
        distributed.teardown()


def _run(experiments: list[Experiment], options: Options, console, sweep_one: SweepOne) -> int:
    failed, interrupted = [], []
    started = time.time()
    for experiment in experiments:  # every design before anything trains: a bad one stops the command at once
        if distributed.rank() == 0:
            declare(experiment, options.results, options.seeds, options.margin, options.max_seeds)
    for experiment in experiments:
        try:
            rows, frame, notes = sweep_one(experiment, options, console)
        except Interrupted as stop:
            raise Interrupted(f"{stop}: ablate run {' '.join(str(e.path) for e in experiments)} ...") from None
        if not rows:
            continue  # a rank other than 0 under torchrun, or jobs left running on the cluster
        root = options.results / experiment.name
        say(console, f"written: {root / SUMMARY_MD} and {SUMMARY_CSV}")
        title = f"{experiment.name}: {experiment.description}"  # the comparison and verdicts `ablate report` prints
        after_run(root, written_since(root, started), console, (title, frame, notes))
        failed += [f"{experiment.name}/{r.run}/seed-{r.seed}: {r.error or ''}"
                   for r in rows if r.status == Status.FAILED]  # fmt: skip
        # stopped in this sweep from outside (Slurm's scancel): its row says by what, in `error`; a run an
        # earlier sweep left resumable, and this one did not train (--only), has no error and does not count
        interrupted += [f"{experiment.name}/{r.run}/seed-{r.seed}: {r.error}"
                        for r in rows if r.status == Status.INTERRUPTED and r.error]  # fmt: skip
    if failed:
        print("failed runs:\n  " + "\n  ".join(failed), file=sys.stderr)
        return Exit.FAILED
    if interrupted:  # resumable, but not done
        print("interrupted runs (the same command resumes them):\n  " + "\n  ".join(interrupted), file=sys.stderr)
        return Exit.INTERRUPTED
    return Exit.COMPLETED


def written_since(experiment: Path, moment: float) -> bool:
    """Whether a run of the experiment wrote its result.json at `moment` or after: this command trained (or decoded)
    something, and the experiment's page is out of date."""
    return any((d / RESULT).is_file() and (d / RESULT).stat().st_mtime >= moment
               for run in run_dirs(experiment) for d in seed_dirs(run))  # fmt: skip


def check_only(experiments: list[Experiment], only: list[str]) -> None:
    """Every name `--only` gives is a run (or, in a learning-rate sweep, an arm) of each experiment."""
    for experiment in experiments:
        names = list(dict.fromkeys([*experiment.arms, *(run.name for run in experiment.runs)]))
        for name in only:
            if name not in names:
                raise UserError(f"--only: {experiment.path} has no run '{name}'{did_you_mean(name, names)} "
                                f"(runs: {', '.join(names)})")  # fmt: skip


def check_results(results: Path) -> None:
    """`--results DIR` is where experiments' directories go, not one of them: `ablate report` takes an experiment's
    directory, and a user who gives `ablate run` the same would nest a new experiment inside it."""
    if (results / "design.json").is_file() or (results / RUNS).is_dir():
        raise UserError(f"--results {results}: an experiment's directory (it holds "
                        f"{'design.json' if (results / 'design.json').is_file() else RUNS + '/'}); --results takes the "
                        f"directory experiments go in: --results {results.parent}")  # fmt: skip


def sweep(experiment: Experiment, options: Options, console) -> Summary:
    """Plans, prepares, launches and collects one experiment; returns its records and table (none on ranks > 0)."""
    planned = plan(experiment, options.results, options.seeds, options.fresh)  # every run goes in the summary
    selected = [p for p in planned if not options.only or {p.job.run, p.job.arm} & set(options.only)]
    training = [p for p in selected if p.trains]
    launcher = make_launcher(experiment, options, len(training))
    rank0 = distributed.rank() == 0
    say = console.print if rank0 else (lambda *a, **k: None)
    per_run = Counter(p.job.run for p in planned)
    runs, counts = len(per_run), set(per_run.values())
    size = f"x {counts.pop()} seed(s)" if len(counts) == 1 else f"{len(planned)} jobs"  # a sequential design's look
    say(f"{experiment.path}: {experiment.name}, {runs} run{'s' if runs != 1 else ''} {size}, "
        f"{len(training)} to train on {launcher.describe()} -> {options.results / experiment.name}",
        highlight=False)  # fmt: skip
    for p in selected:
        if p.detail:
            say(f"  {p.job.label}: {p.detail}", highlight=False)
    if rank0 and isinstance(launcher, LocalLauncher) and (slow := emulated_bf16([p.job for p in training],
                                                                                launcher.resources)):  # fmt: skip
        say(slow, highlight=False)
    if rank0:
        prepare_data([p.job for p in training], console)
        for p in training:
            prepare(p, options.tensorboard)
            if isinstance(launcher, LocalLauncher) and (kept := kept_threads(p, launcher.resources)):
                say(f"  {p.job.label}: {kept}", highlight=False)
    distributed.barrier()
    if rank0:
        reuse_finished(selected, options.results)  # what finished elsewhere: before training anything
    jobs = [p.job for p in training]
    # Jobs another process trains: a Slurm launcher follows those its cluster runs (an earlier `ablate run`'s)
    busy = [p.job for p in selected if p.action == Action.BUSY] if getattr(launcher, "follows_busy", False) else []
    view = SweepView(console, jobs + busy, len(selected) - len(training) - len(busy)) if rank0 else _Silent()
    try:
        outcomes = launcher.launch(jobs, view, busy) if busy else launcher.launch(jobs, view)
    except Interrupted:  # the workers saved their checkpoints: the table says what stands
        view.close()
        if rank0:
            write_results(experiment, options.results, planned, {})
        raise
    finally:
        view.close()
    if outcomes is None or not rank0:
        return [], None, []  # left running on the cluster, or a rank that only trained
    reuse_finished(selected, options.results)  # what trained in this sweep
    return write_results(experiment, options.results, planned, outcomes)


def make_launcher(experiment: Experiment, options: Options, jobs: int = 1) -> Launcher:
    """The launcher the flags ask for, for `jobs` jobs to train; under torchrun, every rank trains in this process."""
    device = options.device or device_kind(experiment.baseline.spec.training.device)
    if distributed.launched():
        from ablate.sweep.launchers.torchrun import TorchrunLauncher

        if options.runs_per_gpu > 1:
            raise UserError(f"--runs-per-gpu {options.runs_per_gpu}: not under torchrun, where every rank trains "
                            "the same run")  # fmt: skip
        return TorchrunLauncher(device)
    if options.launcher == "local":
        return LocalLauncher(resources(device, options.gpus_per_run or 1, threads_per_run=options.threads_per_run,
                                       jobs=jobs, runs_per_gpu=options.runs_per_gpu))  # fmt: skip
    from ablate.sweep.experiment import SlurmSpec, slurm_settings
    from ablate.sweep.launchers.slurm import SlurmLauncher

    folder = options.results / experiment.name / "slurm"
    return SlurmLauncher(options.launcher, slurm_settings(experiment.slurm or SlurmSpec(), dict(options.slurm)), folder,
                         device, options.wait)  # fmt: skip


def prepare(planned: Planned, tensorboard: Path | None = None) -> None:
    """Makes the run directory ready for its action: stale results set aside, leftovers cleared, job.json written."""
    job, d = planned.job, planned.job.directory
    if tensorboard is not None:
        job.tensorboard = str(tensorboard / job.experiment / job.run / f"seed-{job.seed}")
    if planned.action == Action.FRESH:
        shutil.rmtree(d)
    elif planned.action == Action.RERUN:
        stale = stale_path(d)
        d.rename(stale)
        job.note = f"re-run: the spec changed since the earlier result, kept in {stale.name}"
    elif planned.action == Action.REDECODE:
        job.threads = Job.load(d).threads  # decoded on the threads it trained on, as a run uninterrupted is
        stale = set_aside_for_decoding(d, job.config_hash)
        job.note = f"decoded again: only the decoding changed since the earlier result, kept in {stale.name}"
    elif planned.action == Action.RETRY:
        (d / RESULT).unlink(missing_ok=True)
    elif planned.action == Action.RESUME and (d / JOB).is_file():
        job.threads = Job.load(d).threads  # round-off depends on the threads: a resumed run keeps its own
        if training_goes_on(d, job.spec) is not None:  # only the decoding changed: the checkpoint takes the config
            adopt_checkpoint(d, job.config_hash)
    if d.is_dir():  # the live view reads these logs before the worker starts: only what the run resumes from
        truncate_metrics(d, checkpoint_step(d, job.config_hash))
    job.save()


def kept_threads(planned: Planned, res: Resources) -> str | None:
    """A note when a resumed CPU run keeps the threads it trained on (prepare) where the sweep gives others."""
    kept = planned.job.threads
    if planned.action not in (Action.RESUME, Action.REDECODE) or kept is None or res.gpus or not res.cpus:
        return None
    if not res.threads_per_run or kept == res.threads_per_run or kept > len(res.cpus):
        return None  # unpinned, the same count, or more than the sweep's cores (then it takes the sweep's)
    return (
        f"keeps the {kept} thread(s) it trained on, not the sweep's {res.threads_per_run}: "
        f"its round-off depends on them; `threads: null` in its job.json lets the sweep choose"
    )


def reuse_finished(planned: list[Planned], results: Path) -> None:
    """Copies the result of every REUSE job whose source has finished (see rundir.reuse)."""
    for p in planned:
        if p.action != Action.REUSE or p.source is None:
            continue
        source = read_result(p.source)
        if source is None or not source.finished:
            continue
        d = p.job.directory
        if d.is_dir() and stored_hash(d) not in (None, p.job.config_hash):
            d.rename(stale_path(d))
        p.job.save()
        reuse(p.source, d, p.job.identity(), results)


def prepare_data(jobs: list[Job], console: Any = None) -> None:
    """Checks each corpus (downloading what is missing) and prepares it once (ablate.data.prepared: the vocabulary
    learned, the training and validation splits encoded, every file's checksum checked), before any worker. The
    sweep never loads a corpus: its workers memory-map what this prepared."""
    from ablate.data.dataset import prepare_dataset
    from ablate.sweep.progress import Preparing

    prepared = set()
    for job in jobs:
        spec = job.run_spec()
        key = (spec.data.model_dump_json(), spec.tokenizer.model_dump_json())
        if key not in prepared:
            prepared.add(key)
            with Preparing(console) as view:
                prepare_dataset(spec.data, spec.tokenizer, view.report, view.say)


def prepare_experiments(experiments: list[Experiment], console: Any) -> None:
    """`ablate data prepare`: every corpus the experiments' runs train on, prepared and checked, with what it holds."""
    from ablate.data.dataset import prepare_dataset
    from ablate.data.prepared import describe
    from ablate.sweep.progress import Preparing

    done = set()
    for experiment in experiments:
        for run in experiment.runs:
            spec = run.spec
            key = (spec.data.model_dump_json(), spec.tokenizer.model_dump_json())
            if key in done:
                continue
            done.add(key)
            with Preparing(console) as view:
                prepared = prepare_dataset(spec.data, spec.tokenizer, view.report, view.say)
            console.print(f"{experiment.path}: {run.name}: {describe(prepared)}", highlight=False, soft_wrap=True)


def collect(planned: list[Planned], outcomes: Outcomes) -> list[RunResult]:
    """The result of every job in plan order: this sweep's, or what the run directory held."""
    rows = []
    for p in planned:
        result = outcomes.get(p.job.label)
        if result is None or result.status == Status.BUSY:  # another process had it: it may have finished since
            found = read_result(p.job.directory)
            if found is not None and (found.config_hash or p.job.config_hash) == p.job.config_hash:
                result = found
        if result is None or (result.config_hash or p.job.config_hash) != p.job.config_hash:
            resumable = checkpoint_step(p.job.directory, p.job.config_hash) is not None
            status = (Status.RUNNING_ELSEWHERE if p.action == Action.BUSY
                      else Status.INTERRUPTED if resumable else Status.NOT_RUN)  # fmt: skip
            result = RunResult(run=p.job.run, seed=p.job.seed, describe=p.job.describe, status=status)
        rows.append(result)
    return rows


def write_results(experiment: Experiment, results: Path, planned: list[Planned], outcomes: Outcomes) -> Summary:
    """summary.md and summary.csv: the report's table of every job, without significance tests."""
    from ablate.report.frame import report_frame
    from ablate.report.results import from_records
    from ablate.report.tables import main_table, render

    rows = collect(planned, outcomes)
    root = results / experiment.name
    frame, notes = report_frame(from_records(experiment.name, root, rows), test="none")
    title = f"{experiment.name}: {experiment.description}"
    main, main_notes = main_table(frame, notes)  # the page's columns; the csv keeps every one
    write_text(root / SUMMARY_MD, render("md", main, title, main_notes))
    write_text(root / SUMMARY_CSV, render("csv", frame, title, notes))
    return rows, frame, notes


class _Silent:
    """The view of ranks other than 0: they train, rank 0 reports."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None
