"""`ablate check [REFERENCE...]`: re-runs a reference baseline and compares it with the numbers kept in git.

results/reference/<name>.yaml keeps a baseline recipe's resolved spec, the metrics that matter
(parameters, BLEU, chrF, validation loss at fixed steps), how far each may move, and the environment
it was measured in. `--update` measures it again and rewrites it: on purpose only.
"""

from __future__ import annotations

import contextlib
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ablate.errors import SpecError, UserError, did_you_mean
from ablate.rundir import Status

REFERENCES = Path("results") / "reference"


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: str
    params: int
    bleu: float
    chrf: float
    valid_loss: dict[int, float] = Field(description="validation loss at fixed steps")


class Tolerance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: int = 0
    bleu: float
    chrf: float
    valid_loss: float


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
    tolerance: Tolerance
    why: str = Field(description="why the tolerances are what they are")
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


def measure(ref: Reference, spec: dict[str, Any], plugins: list[str], work: Path, console) -> dict[str, Any]:
    """Trains the reference's baseline in a worker process; returns its result.json and validation losses."""
    from ablate.rundir import config_hash, read_metrics
    from ablate.sweep.devices import Resources
    from ablate.sweep.launchers.local import LocalLauncher
    from ablate.sweep.progress import SweepView
    from ablate.sweep.runner import prepare_data
    from ablate.train.job import Job

    directory = work / ref.name / "runs" / "baseline" / "seed-1"
    job = Job(f"check-{ref.name}", "baseline", spec["training"]["seed"], directory, spec, {}, "-", plugins,
              config_hash(spec), threads=ref.threads)  # fmt: skip
    job.directory.mkdir(parents=True, exist_ok=True)
    prepare_data([job])
    view = SweepView(console, [job])
    try:
        result = LocalLauncher(Resources([0] if ref.device == "cuda" else [])).launch([job], view)[job.label]
    finally:
        view.close()
    losses = {r["step"]: r["valid_loss"] for r in read_metrics(job.directory) if "valid_loss" in r}
    return result | {"valid_losses": losses}


def compare(ref: Reference, measured: dict[str, Any]) -> list[tuple[str, str, str, str, bool]]:
    """(metric, expected, measured, tolerance, within) for every metric the reference keeps."""
    exp, tol = ref.expected, ref.tolerance
    score = (measured.get("scores") or {}).get(exp.split, {})
    rows = [_row("params", exp.params, measured.get("params"), tol.params, "{:,}"),
            _row(f"BLEU {exp.split}", exp.bleu, score.get("bleu"), tol.bleu),
            _row(f"chrF {exp.split}", exp.chrf, score.get("chrf"), tol.chrf)]  # fmt: skip
    losses = measured.get("valid_losses", {})
    rows += [_row(f"valid loss @ {step}", value, losses.get(step), tol.valid_loss, "{:.4f}")
             for step, value in sorted(exp.valid_loss.items())]  # fmt: skip
    return rows


def _row(name: str, expected: float, measured: float | None, tolerance: float, fmt: str = "{:.2f}"):
    ok = measured is not None and abs(measured - expected) <= tolerance + 1e-9
    shown = "-" if measured is None else fmt.format(measured)
    return name, fmt.format(expected), shown, f"± {fmt.format(tolerance)}", ok


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


def _normalised(spec: dict[str, Any], plugins: list[str]) -> dict[str, Any]:
    """A stored spec as the spec reads it today: keys added since (with their defaults) filled in."""
    from ablate.registry import load_plugin
    from ablate.train.spec import RunSpec

    for i, plugin in enumerate(plugins):
        load_plugin(plugin, REFERENCES / "plugins", ("plugins", i))
    return RunSpec.model_validate(spec).model_dump(mode="json")


def expected_from(result: dict[str, Any], spec: dict[str, Any]) -> Expected:
    split = spec["data"]["test"][0]
    score = result["scores"][split]
    return Expected(split=split, params=result["params"], bleu=score["bleu"], chrf=score["chrf"],
                    valid_loss=dict(sorted(result["valid_losses"].items())))  # fmt: skip


def dump(ref: Reference) -> str:
    """The reference as YAML, in the order people read it."""
    data = ref.model_dump(mode="json", exclude_none=True)
    return "# Made and rewritten by `ablate check --update`; see results/reference/README.md.\n" + yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True, width=100
    )


def check(path: Path, update: bool, keep: Path | None, named: bool, out) -> bool:
    """Re-runs one reference and prints expected against measured (or rewrites it); False when it fails."""
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
    else:
        spec, plugins = ref.spec, ref.plugins
        with contextlib.suppress(UserError):
            if resolve_source(ref)[0] != _normalised(spec, plugins):
                out.print(f"  note: {ref.source} now resolves to a different spec than this reference keeps; "
                          "the reference's own spec is checked", highlight=False)  # fmt: skip
    out.print(f"{path}: re-running {ref.name} ({ref.description})", highlight=False)
    with contextlib.ExitStack() as stack:
        work = keep if keep is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ablate-")))
        measured = measure(ref, spec, plugins, work, out)
    if measured.get("status") != Status.COMPLETED:
        out.print(f"{ref.name}: the run {measured.get('status')}: {measured.get('error', '')}", highlight=False)
        return False
    if update:
        if spec["training"]["precision"] == "auto":  # a reference pins what it measured, as it pins threads
            spec["training"]["precision"] = measured["precision"]
        updated = ref.model_copy(update={"status": "measured", "spec": spec, "plugins": plugins,
                                         "expected": expected_from(measured, spec),
                                         "environment": environment(measured)})  # fmt: skip
        write_text(path, dump(updated))
        out.print(f"{path}: rewritten with the measured values", highlight=False)
        return True
    rows = compare(ref, measured)
    made = f"made on {ref.environment.get('device', '?')}, torch {ref.environment.get('torch', '?')}"
    table = Table(title=f"{ref.name}: expected ({made}) and measured", title_justify="left")
    for column in ("metric", "expected", "measured", "tolerance", ""):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, expected, got, tolerance, ok in rows:
        table.add_row(name, expected, got, tolerance, "ok" if ok else "OUTSIDE")
    out.print(table)
    return all(row[4] for row in rows)


def check_all(names: list[str], update: bool, keep: Path | None, out) -> int:
    """`ablate check`: each named reference (default: every measured one); the exit code, 1 when any failed."""
    import sys

    failed = [str(path) for path in find(names) if not check(path, update, keep, bool(names), out)]
    if failed:
        print(f"check failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
