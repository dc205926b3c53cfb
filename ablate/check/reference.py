"""`ablate check [REFERENCE...]`: re-runs a reference baseline and compares it with the numbers kept in git.

results/reference/<name>.yaml keeps a baseline recipe's resolved spec, what each of several seeds
measured (parameters, BLEU, chrF, the validation loss at fixed steps, a hash of the test hypotheses),
and the machine it was measured on. `--update` measures it again and rewrites it: on purpose only.

The check trains the first seed again and judges it in one of two modes:
- **exact**, on the CPU that made the reference (same device name, hence CPU model, ISA and threads,
  same torch, same precision): a run is deterministic there, so the hypotheses' hash and every number
  must be equal;
- **within seed noise**, anywhere else: another CPU's round-off sends training down another path,
  as a new seed would. Each metric may move by `multiple` seed-to-seed standard deviations (or its
  floor), where the multiple is the Student t prediction interval for one new seed against the
  seeds' mean at the reference's false-alarm rate, split over the metrics (Bonferroni):
  k = t(1 - a / 2m; n - 1) * sqrt(1 + 1/n). results/reference/README.md works it through.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ablate.errors import SpecError, UserError, did_you_mean
from ablate.rundir import Status

REFERENCES = Path("results") / "reference"


class SeedRun(BaseModel):
    """What one seed of the reference measured."""

    model_config = ConfigDict(extra="forbid")

    bleu: float
    chrf: float
    valid_loss: dict[int, float] = Field(description="validation loss at fixed steps")
    hypotheses: str = Field(description="sha256 of the test split's hypotheses file")

    @property
    def curve(self) -> float:
        """The validation loss curve's mean: one number that sees the whole run."""
        return statistics.fmean(self.valid_loss.values())


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: str
    params: int
    seeds: dict[int, SeedRun] = Field(description="each seed's measurements; the check re-runs the first")

    @property
    def first(self) -> int:
        return min(self.seeds)


NOISE_METRICS = ("valid loss curve", "BLEU", "chrF")  # judged within seed noise on another machine, in this order


def metric(run: SeedRun, name: str) -> float:
    return {"valid loss curve": run.curve, "BLEU": run.bleu, "chrF": run.chrf}[name]


class Tolerance(BaseModel):
    """How a run on another machine is judged: within `multiple(n)` seed standard deviations, or the floor."""

    model_config = ConfigDict(extra="forbid")

    false_alarm: float = Field(0.01, gt=0, lt=1, description="chance that a correct run elsewhere fails")
    floor: dict[str, float] = Field(
        default_factory=lambda: {"valid loss curve": 0.005, "BLEU": 0.3, "chrF": 0.3},
        description="the least tolerance of each metric, however close the seeds fell",
    )

    @field_validator("floor")
    @classmethod
    def _known_metrics(cls, floor: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(floor) - set(NOISE_METRICS))
        if unknown:
            raise ValueError(f"no metric {', '.join(unknown)}; the metrics are {', '.join(NOISE_METRICS)}")
        return floor

    def multiple(self, n: int) -> float:
        """k = t(1 - a/2m; n-1) * sqrt(1 + 1/n): a new seed's prediction interval against n seeds' mean and sd."""
        from scipy.stats import t

        m = len(NOISE_METRICS)
        return float(t.ppf(1 - self.false_alarm / (2 * m), n - 1) * math.sqrt(1 + 1 / n))


class Published(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bleu: float
    source: str
    flavour: str


class Reference(BaseModel):
    """One reference file."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    source: str = Field(description="the experiment file it is made from, relative to the repository root")
    status: Literal["measured", "not yet measured"]
    device: Literal["cpu", "cuda"] = "cpu"
    threads: int | None = Field(None, description="CPU threads the reference pins")
    seeds: int = Field(3, ge=2, description="seeds `--update` measures (their spread sets the tolerances)")
    tolerance: Tolerance = Field(default_factory=Tolerance)
    why: str = Field(description="why the tolerances are what they are")
    machine: dict[str, str] | None = Field(None, description="where it was measured: device (CPU model, ISA, "
                                           "threads), torch, precision")  # fmt: skip
    expected: Expected | None = None
    environment: dict[str, Any] = Field(default_factory=dict)
    published: Published | None = None
    spec: dict[str, Any] | None = Field(None, description="the resolved spec it was measured with")
    plugins: list[str] = Field(default_factory=list, description="plugins the spec's parts need")


def find(names: list[str], root: Path = REFERENCES) -> list[Path]:
    """Reference files: by path, or by name under results/reference/; all of them when none is named."""
    available = sorted(root.glob("*.yaml")) if root.is_dir() else []
    if not names:
        if not available:
            raise UserError(f"{root}: no reference files (*.yaml)")
        return available
    paths = []
    for name in names:
        path = Path(name)
        if not path.is_file():
            path = root / f"{name}.yaml"
        if not path.is_file():
            known = [p.stem for p in available]
            raise UserError(f"{name}: no such reference{did_you_mean(name, known)} (in {root}: {', '.join(known)})")
        paths.append(path)
    return paths


def load(path: Path) -> Reference:
    from ablate.sweep.specfile import read_yaml

    try:
        return Reference.model_validate(read_yaml(path))
    except ValidationError as error:
        raise SpecError.of(error, path, Reference) from None


def measure(ref: Reference, spec: dict[str, Any], plugins: list[str], seeds: list[int], threads: int | None,
            work: Path, console) -> dict[int, dict[str, Any]]:  # fmt: skip
    """Trains the reference's baseline with each seed in worker processes, side by side where the cores allow;
    returns each seed's result.json with its validation losses and its hypotheses' hash."""
    from ablate.rundir import config_hash, hypotheses_path, read_metrics
    from ablate.sweep.devices import Resources
    from ablate.sweep.launchers.local import LocalLauncher
    from ablate.sweep.progress import SweepView
    from ablate.sweep.runner import prepare_data
    from ablate.train.job import Job

    jobs = []
    for seed in seeds:
        seeded = spec | {"training": spec["training"] | {"seed": seed}}
        directory = work / ref.name / "runs" / "baseline" / f"seed-{seed}"
        jobs.append(Job(f"check-{ref.name}", "baseline", seed, directory, seeded, {}, "-", plugins,
                        config_hash(seeded), threads=threads))  # fmt: skip
        directory.mkdir(parents=True, exist_ok=True)
    prepare_data(jobs)
    if ref.device == "cuda":
        resources = Resources([0])
    elif threads is None:
        resources = Resources([])  # one run at a time, on every core
    else:
        cores = sorted(os.sched_getaffinity(0))
        resources = Resources([], cpus=cores, threads_per_run=min(threads, len(cores)))
    view = SweepView(console, jobs)
    try:
        outcomes = LocalLauncher(resources).launch(jobs, view)
    finally:
        view.close()
    split = spec["data"]["test"][0]
    measured = {}
    for job in jobs:
        result = dict(outcomes[job.label])
        result["valid_losses"] = {r["step"]: r["valid_loss"] for r in read_metrics(job.directory) if "valid_loss" in r}
        path = hypotheses_path(job.directory, split)
        result["hypotheses_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        measured[job.seed] = result
    return measured


def seed_run(result: dict[str, Any], split: str) -> SeedRun:
    score = result["scores"][split]
    return SeedRun(bleu=score["bleu"], chrf=score["chrf"], valid_loss=dict(sorted(result["valid_losses"].items())),
                   hypotheses=result["hypotheses_sha256"])  # fmt: skip


def scored(result: dict[str, Any], split: str) -> SeedRun | None:
    """`seed_run`, or None for a run that has no scores or losses to compare (it failed before decoding)."""
    try:
        return seed_run(result, split)
    except (KeyError, TypeError):
        return None


Row = tuple[str, str, str, str, bool]  # metric, expected, measured, tolerance, within


def same_machine(ref: Reference, result: dict[str, Any]) -> bool:
    """Whether `result` ran where the reference was made: there a run is deterministic."""
    return ref.machine is not None and ref.machine == machine(result)


def machine(result: dict[str, Any]) -> dict[str, str]:
    return {"device": str(result.get("device")), "torch": str(result.get("torch")),
            "precision": str(result.get("precision"))}  # fmt: skip


def compare_exact(ref: Reference, result: dict[str, Any]) -> list[Row]:
    """Every number and the hypotheses' hash of the first seed, equal to the last digit kept."""
    exp = ref.expected
    run = exp.seeds[exp.first]
    got = scored(result, exp.split)
    rows: list[Row] = [_exact("params", f"{exp.params:,}", _fmt(result.get("params"), "{:,}"))]
    rows.append(_exact(f"hypotheses {exp.split} (sha256)", run.hypotheses[:12],
                       got.hypotheses[:12] if got and got.hypotheses else "-"))  # fmt: skip
    rows.append(_exact(f"BLEU {exp.split}", f"{run.bleu:.2f}", _fmt(got and got.bleu, "{:.2f}")))
    rows.append(_exact(f"chrF {exp.split}", f"{run.chrf:.2f}", _fmt(got and got.chrf, "{:.2f}")))
    for step, value in run.valid_loss.items():
        rows.append(_exact(f"valid loss @ {step}", f"{value:.4f}", _fmt(got and got.valid_loss.get(step), "{:.4f}")))
    return rows


def compare_noise(ref: Reference, result: dict[str, Any]) -> list[Row]:
    """The first seed's metrics against the seeds' mean, each within k seed standard deviations (or its floor)."""
    exp, tol = ref.expected, ref.tolerance
    runs = list(exp.seeds.values())
    k = tol.multiple(len(runs))
    got = scored(result, exp.split)
    rows: list[Row] = [_exact("params", f"{exp.params:,}", _fmt(result.get("params"), "{:,}"))]
    if got is not None and set(got.valid_loss) != set(runs[0].valid_loss):
        got = None  # validated at other steps: the curves cannot be compared
    for name in NOISE_METRICS:
        values = [metric(run, name) for run in runs]
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        allowed = max(k * sd, tol.floor.get(name, 0.0))
        fmt = "{:.4f}" if name.startswith("valid") else "{:.2f}"
        value = None if got is None else metric(got, name)
        ok = value is not None and abs(value - mean) <= allowed + 1e-9
        rows.append((name, f"{fmt.format(mean)} ± {fmt.format(sd)} sd", _fmt(value, fmt), f"± {fmt.format(allowed)}",
                     ok))  # fmt: skip
    return rows


def _exact(name: str, expected: str, measured: str) -> Row:
    return name, expected, measured, "exact", expected == measured


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def environment(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "torch": result.get("torch"), "python": result.get("python"), "device": result.get("device"),
        "precision": result.get("precision"), "seed": result.get("seed"), "host": platform.node(),
        "date": time.strftime("%Y-%m-%d"), "commit": _commit(), "wall_seconds": result.get("wall_seconds"),
    }  # fmt: skip


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None


def resolve_source(ref: Reference) -> tuple[dict[str, Any], list[str]]:
    """The spec as the source experiment file resolves it now, and its plugins."""
    from ablate.sweep.experiment import load_experiment

    experiment = load_experiment(ref.source)
    return experiment.baseline.spec.model_dump(mode="json"), experiment.plugins


def source_changed(ref: Reference) -> bool:
    """Whether the source experiment file now resolves to another spec than the reference keeps. `--update`
    pins `precision: auto` to the precision it measured, so a source that still says auto is not a change."""
    source, kept = resolve_source(ref)[0], _normalised(ref.spec, ref.plugins)
    if source["training"]["precision"] == "auto":
        source["training"]["precision"] = kept["training"]["precision"]
    return source != kept


def _normalised(spec: dict[str, Any], plugins: list[str]) -> dict[str, Any]:
    """A stored spec as the spec reads it today: keys added since (with their defaults) filled in."""
    from ablate.registry import load_plugin
    from ablate.train.spec import RunSpec

    for i, plugin in enumerate(plugins):
        load_plugin(plugin, REFERENCES / "plugins", ("plugins", i))
    return RunSpec.model_validate(spec).model_dump(mode="json")


def expected_from(measured: dict[int, dict[str, Any]], spec: dict[str, Any]) -> Expected:
    split = spec["data"]["test"][0]
    first = measured[min(measured)]
    return Expected(split=split, params=first["params"],
                    seeds={seed: seed_run(result, split) for seed, result in sorted(measured.items())})  # fmt: skip


def dump(ref: Reference) -> str:
    """The reference as YAML, in the order people read it."""
    data = ref.model_dump(mode="json", exclude_none=True)
    return "# Made and rewritten by `ablate check --update`; see results/reference/README.md.\n" + yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True, width=100
    )


def check(path: Path, update: bool, keep: Path | None, named: bool, out, threads: int | None = None,
          noise: bool = False) -> bool:  # fmt: skip
    """Re-runs one reference and prints expected against measured (or rewrites it); False when it fails.

    `threads`: train with this many CPU threads instead of the reference's (a run that differs as another
    CPU's would); `noise`: judge within seed noise even on the machine that made the reference."""
    from rich.table import Table

    from ablate.files import write_text

    ref = load(path)
    if ref.status != "measured" and not update:
        out.print(f"{path}: {ref.name}: not yet measured; to measure it: ablate check --update {path}", highlight=False)
        return not named  # asked for by name, it cannot pass
    from ablate.sweep.devices import cuda_available

    if ref.device == "cuda" and not cuda_available():
        out.print(f"{path}: {ref.name}: made on a GPU and none is visible here; skipped", highlight=False)
        return not named
    if update:
        spec, plugins = resolve_source(ref)
        seeds = list(range(1, ref.seeds + 1))
    else:
        spec, plugins = ref.spec, ref.plugins
        seeds = [ref.expected.first]
        with contextlib.suppress(UserError):
            if source_changed(ref):
                out.print(f"  note: {ref.source} now resolves to a different spec than this reference keeps; "
                          "the reference's own spec is checked", highlight=False)  # fmt: skip
    what = f"{len(seeds)} seeds of " if len(seeds) > 1 else ""
    out.print(f"{path}: {'measuring' if update else 're-running'} {what}{ref.name} ({ref.description})",
              highlight=False)  # fmt: skip
    with contextlib.ExitStack() as stack:
        work = keep if keep is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ablate-")))
        measured = measure(ref, spec, plugins, seeds, threads or ref.threads, work, out)
    for seed, result in measured.items():
        if result.get("status") != Status.COMPLETED:
            out.print(f"{ref.name}: seed {seed}: the run {result.get('status')}: {result.get('error', '')}",
                      highlight=False)  # fmt: skip
            return False
    first = measured[seeds[0]]
    if update:
        if spec["training"]["precision"] == "auto":  # a reference pins what it measured, as it pins threads
            spec["training"]["precision"] = first["precision"]
        updated = ref.model_copy(update={"status": "measured", "spec": spec, "plugins": plugins,
                                         "machine": machine(first), "expected": expected_from(measured, spec),
                                         "environment": environment(first)})  # fmt: skip
        write_text(path, dump(updated))
        out.print(f"{path}: rewritten with the measured values of seeds {', '.join(map(str, seeds))}", highlight=False)
        return True
    exact = ref.device == "cpu" and same_machine(ref, first) and not noise  # GPU kernels are not bit-deterministic
    rows = compare_exact(ref, first) if exact else compare_noise(ref, first)
    made = (ref.machine or {}).get("device") or ref.environment.get("device", "?")
    if exact:
        mode = f"same machine ({made}): exact"
    else:
        k = ref.tolerance.multiple(len(ref.expected.seeds))
        mode = (f"{'asked for' if noise else 'other machine'} ({machine(first)['device']}; made on {made}): within "
                f"seed noise, {k:.2f} sd of {len(ref.expected.seeds)} seeds")  # fmt: skip
    table = Table(title=f"{ref.name}, seed {seeds[0]}: {mode}", title_justify="left")
    for column in ("metric", "expected", "measured", "tolerance", ""):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, expected, got, tolerance, ok in rows:
        table.add_row(name, expected, got, tolerance, "ok" if ok else "OUTSIDE")
    out.print(table)
    passed = all(row[4] for row in rows)
    if exact and not passed:
        within = all(row[4] for row in compare_noise(ref, first))
        out.print(f"  not identical on the machine that made {ref.name}: the code changed its arithmetic "
                  f"({'still within' if within else 'and beyond'} seed noise; --noise judges that way)",
                  highlight=False)  # fmt: skip
    out.print(f"verdict: {ref.name}: {'passed' if passed else 'FAILED'} ({mode})", highlight=False)
    return passed


def check_all(names: list[str], update: bool, keep: Path | None, out, threads: int | None = None,
              noise: bool = False) -> int:  # fmt: skip
    """`ablate check`: each named reference (default: every measured one); the exit code, 1 when any failed."""
    import sys

    failed = [str(path) for path in find(names) if not check(path, update, keep, bool(names), out, threads, noise)]
    if failed:
        print(f"check failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
