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

from ablate.check.reference import REFERENCES, Expected, Measured, Reference
from ablate.record import RunResult, Status, resolved_precision
from ablate.rundir import as_stored, finished_jobs, hypotheses_path, read_metrics, read_result

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


def finished_seeds(ref: Reference, spec: dict[str, Any], plugins: list[str], seeds: list[int],
                   results: Path) -> dict[int, Measured]:  # fmt: skip
    """The seeds that already finished under `results` as completed runs of the same spec and seed (the config hash
    by which `ablate run` reuses a run), read back instead of trained; the others are not in the dict."""
    from ablate.sweep.plan import job_of

    experiment = _experiment(ref, spec, plugins)
    finished = finished_jobs(results)
    split = spec["data"]["test"][0]
    found = {}
    for seed in seeds:
        directory = finished.get(job_of(experiment, experiment.baseline, seed, results).config_hash)
        result = read_result(directory) if directory is not None else None
        if result is not None and result.status == Status.COMPLETED:
            found[seed] = _measured(result, directory, split, run=str(_relative(directory)))
    return found


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
    losses = {r["step"]: r["valid_loss"] for r in read_metrics(directory) if "valid_loss" in r}
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
    """What the seeds measured, as the reference keeps it."""
    split = spec["data"]["test"][0]
    first = measured[min(measured)].result
    return Expected(split=split, params=first.params,
                    seeds={seed: m.seed_run(split) for seed, m in sorted(measured.items())})  # fmt: skip


def environment(result: RunResult) -> dict[str, Any]:
    """Where and when a seed was measured, with what: the reference's `environment`."""
    return {
        "torch": result.torch, "python": result.python, "device": result.device, "precision": result.precision,
        "seed": result.seed, "host": platform.node(), "date": time.strftime("%Y-%m-%d"), "commit": _commit(),
        "wall_seconds": result.wall_seconds,
    }  # fmt: skip


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
