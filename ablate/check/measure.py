"""Measuring a reference: its baseline trained with each seed as the sweep trains a job, then read back.

The reference is an experiment `check-<name>` of one run, `baseline`, and its jobs are the sweep's own
(`ablate.sweep.plan.job_of`: <work>/<name>/runs/baseline/seed-<n>, the sweep's config hash, the reference's
CPU threads pinned). The sweep prepares their data and its local launcher trains them in worker processes,
side by side where the cores allow. Each seed comes back as its run record with its validation losses and
its hypotheses' hash beside it (ablate.check.reference.Measured): what the comparison and the file read.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.check.reference import REFERENCES, Expected, Measured, Reference, shared_steps
from ablate.errors import UserError
from ablate.record import RunResult, Status, resolved_precision
from ablate.rundir import (
    as_stored,
    hypotheses_path,
    is_experiment,
    read_result,
    read_validations,
    run_directories,
    stored_hash,
)

if TYPE_CHECKING:
    from ablate.sweep.devices import Resources
    from ablate.sweep.experiment import Experiment
    from ablate.train.spec import RunSpec


def measure(ref: Reference, spec: dict[str, Any], plugins: list[str], seeds: list[int], threads: int | None,
            work: Path, console) -> dict[int, Measured]:  # fmt: skip
    """Trains the reference's baseline with each seed in worker processes, side by side where the cores allow;
    returns each seed's result.json with its validation losses and its hypotheses' hash."""
    from ablate.sweep.launchers.local import LocalLauncher
    from ablate.sweep.plan import job_of
    from ablate.sweep.progress import SweepView
    from ablate.sweep.runner import prepare_data

    experiment = _experiment(ref, spec, plugins)
    jobs = [job_of(experiment, experiment.baseline, seed, work / ref.name, threads) for seed in seeds]
    for job in jobs:
        job.directory.mkdir(parents=True, exist_ok=True)
    prepare_data(jobs)
    view = SweepView(console, jobs)
    try:
        outcomes = LocalLauncher(_resources(ref.device, threads)).launch(jobs, view)
    finally:
        view.close()
    split = spec["data"]["test"][0]
    return {job.seed: _measured(outcomes[job.label], job.directory, split) for job in jobs}


def finished_seeds(ref: Reference, spec: dict[str, Any], plugins: list[str], seeds: list[int], results: Path,
                   console) -> dict[int, Measured]:  # fmt: skip
    """The seeds that completed under `results` (<experiment>/runs/<run>/seed-<n>) as runs of the same spec and
    seed (the config hash by which `ablate run` reuses a run), read back instead of trained; the others are not in
    the dict. A run is read only where the reference could have trained it: on its kind of device, in one
    precision with the other seeds, and with its threads when the reference is judged exactly (its first seed is
    re-run and must come out the same). A run of the same spec and seed that has not finished is an error: it
    would train again here from scratch, for as long as it took there."""
    from ablate.sweep.plan import job_of

    directories = run_directories(results)
    if not directories:
        hint = "; its parent, perhaps?" if is_experiment(results) else ""
        raise UserError(f"--from-results {results}: no runs (<experiment>/runs/<run>/seed-<n>) under it{hint}")
    by_hash: dict[str, list[Path]] = {}
    for directory in directories:
        by_hash.setdefault(stored_hash(directory) or "", []).append(directory)
    experiment = _experiment(ref, spec, plugins)
    split = spec["data"]["test"][0]
    found: dict[int, Measured] = {}
    for seed in seeds:
        for directory in by_hash.get(job_of(experiment, experiment.baseline, seed, results).config_hash, []):
            result = read_result(directory)
            if result is None or not result.finished:
                raise UserError(
                    f"--from-results: {directory}: the reference's spec and seed {seed}, not finished; finish it "
                    "with `ablate run` first, or leave out --from-results to train it here"
                )
            why = _unlike(ref, result, next(iter(found.values()), None))
            if why:
                console.print(f"  seed {seed}: {directory} not read: {why}", highlight=False)
            elif result.status == Status.COMPLETED and not result.reused_from:
                found[seed] = _measured(result, directory, split, run=str(_relative(directory)))
                break
    return found


def _unlike(ref: Reference, result: RunResult, first: Measured | None) -> str | None:
    """Why a finished run is not one the reference could have trained, or None."""
    if bool(result.gpus) != (ref.device == "cuda"):
        return f"it trained on {'a GPU' if result.gpus else 'the CPU'}, the reference is a {ref.device} one"
    if first is not None and result.precision != first.result.precision:
        return f"it trained in {result.precision}, the seeds read before in {first.result.precision}"
    if ref.mode == "exact" and ref.threads is not None and result.threads != ref.threads:
        return (f"it trained with {result.threads} thread(s), the reference pins {ref.threads} and is judged exactly "
                "(mode: noise would take it)")  # fmt: skip
    return None


def _relative(path: Path) -> Path:
    path = path.resolve()
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def can_measure(ref: Reference) -> bool:
    """Whether this machine has the reference's device: one made on a GPU needs a visible GPU."""
    from ablate.sweep.devices import cuda_available

    return ref.device != "cuda" or cuda_available()


def _experiment(ref: Reference, spec: dict[str, Any], plugins: list[str]) -> Experiment:
    """The reference as the sweep plans it: an experiment `check-<name>` whose one run, `baseline`, is `spec`."""
    from ablate.sweep.experiment import Experiment, Run

    baseline = Run("baseline", _run_spec(spec, plugins), {})
    return Experiment(Path(ref.source), f"check-{ref.name}", ref.description, [baseline], plugins)


def _run_spec(spec: dict[str, Any], plugins: list[str]) -> RunSpec:
    """A stored spec validated as the spec reads it today, after importing the plugins that register its parts; a
    key added since it was stored reads as what runs had then (rundir.as_stored), not as today's default."""
    from ablate.registry import load_plugin
    from ablate.train.spec import RunSpec

    for i, plugin in enumerate(plugins):
        load_plugin(plugin, REFERENCES / "plugins", ("plugins", i))
    return RunSpec.model_validate(as_stored(spec))


def _resources(device: str, threads: int | None) -> Resources:
    """What the launcher hands out: the first GPU, or every core for one run at a time, or runs of `threads`
    cores side by side."""
    from ablate.sweep.devices import Resources, usable_cores

    if device == "cuda":
        return Resources([0])
    if threads is None:
        return Resources([])  # one run at a time, on every core
    cores = usable_cores()
    return Resources([], cpus=cores, threads_per_run=min(threads, len(cores)))


def _measured(outcome: RunResult, directory: Path, split: str, run: str | None = None) -> Measured:
    """A seed's outcome with the validation losses from metrics.jsonl and the sha256 of the split's hypotheses."""
    losses = {v.step: v.valid_loss for v in read_validations(directory)}
    path = hypotheses_path(directory, split)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return Measured(outcome, losses, digest, run)


def resolve_source(ref: Reference) -> tuple[dict[str, Any], list[str]]:
    """The spec as the source experiment file resolves it now, and its plugins."""
    from ablate.sweep.experiment import load_experiment

    experiment = load_experiment(ref.source)
    return experiment.baseline.spec.model_dump(mode="json"), experiment.plugins


def source_changed(ref: Reference) -> bool:
    """Whether the source experiment file now resolves to another spec than the reference keeps. `--update`
    pins `precision: auto` to the precision it measured, so a source that still says auto is not a change."""
    source, kept = resolve_source(ref)[0], _run_spec(ref.spec, ref.plugins).model_dump(mode="json")
    source["training"]["precision"] = resolved_precision(source["training"]["precision"], kept["training"]["precision"])
    return source != kept


def expected_from(measured: dict[int, Measured], spec: dict[str, Any]) -> Expected:
    """What the seeds measured, as the reference keeps it. Raises UserError where their loss curves share no steps
    to compare (`shared_steps`)."""
    split = spec["data"]["test"][0]
    first = measured[min(measured)].result
    several = len({m.result.device for m in measured.values()}) > 1  # then each seed says where it trained
    seeds = {seed: m.seed_run(split, several) for seed, m in sorted(measured.items())}
    curves = {seed: run.valid_loss for seed, run in seeds.items() if run is not None}
    if len(curves) == len(seeds) and shared_steps(list(curves.values())) is None:
        at = ", ".join(f"{seed} (validated at {_steps(curve)})" for seed, curve in curves.items())
        raise UserError(f"--update: seeds {at}: their validation losses are not at the same steps up to where the "
                        "first ends, so no loss curve can be compared")  # fmt: skip
    return Expected(split=split, params=first.params, seeds=seeds)


def _steps(curve: dict[int, float]) -> str:
    steps = sorted(curve)
    return ", ".join(map(str, steps[:4])) + (f", ... {steps[-1]}" if len(steps) > 4 else "")


def environment(measured: Measured) -> dict[str, Any]:
    """Where and when a seed was measured, with what: the reference's `environment`. A seed read from a finished run
    (`--from-results`) has that run's host and date, and the commit it trained at is not known."""
    result = measured.result
    read = measured.run is not None
    return {
        "torch": result.torch, "python": result.python, "device": result.device, "precision": result.precision,
        "seed": result.seed, "host": result.host if read else platform.node(),
        "date": (result.ended_at or "")[:10] if read else time.strftime("%Y-%m-%d"),
        "commit": None if read else _commit(), "wall_seconds": result.wall_seconds,
    } | ({"read_from": measured.run} if read else {})  # fmt: skip


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
