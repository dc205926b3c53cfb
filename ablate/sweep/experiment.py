"""Experiment files: a baseline spec (inline or `extends:`), its variants and grids, expanded into runs.

    name: pe
    extends: base.yaml           # relative to this file; chains allowed
    model: {dropout: 0.2}        # merged over what base.yaml says
    variants:
      learned: {model.positions: learned}
    grid:
      model.heads: [1, 2, 4, 8]  # runs named heads=1, heads=2, ...
    lr_sweep: [3.0e-4, 1.0e-3, 3.0e-3]   # every run at every peak rate: baseline,lr=0.001,
                                         # learned,lr=0.001, heads=1,lr=0.001, ...

Every problem is reported as `FILE: dotted.key: what is wrong`, before any tensor exists.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, field_validator

from ablate.config import flatten, show
from ablate.errors import Issue, SpecError, dotted, issues_from, unknown_key
from ablate.files import read_yaml
from ablate.registry import PartSpec, load_plugin
from ablate.sweep.specfile import apply_overrides, keys_of, merge, parse_overrides
from ablate.train.schedules import SCHEDULE
from ablate.train.spec import RunSpec

RUN_NAME = re.compile(r"^[\w.=,+-]+$")


class SlurmSpec(BaseModel):
    """Where and how long the jobs of `--launcher slurm` run; flags of `ablate run` override these."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    partition: str | None = Field(None, description="the Slurm partition (default: the cluster's default)")
    time_min: int = Field(240, gt=0, description="time limit of one job, in minutes")
    gpus_per_run: int | None = Field(
        None, ge=0, description="GPUs of one run (DDP when above 1); default: 0 for a cpu spec, 1 for cuda, "
        "and for auto 1 where the partition's nodes have GPUs"
    )  # fmt: skip
    cpus_per_run: int | None = Field(
        None, gt=0, description="CPU cores of one run; default: what every node of the partition can give, "
        "all of its CPUs for a CPU run, its CPUs per GPU times the run's GPUs for a GPU run"
    )  # fmt: skip
    mem_gb: int | None = Field(None, gt=0, description="memory of one run (default: the cluster's)")
    array_parallelism: int = Field(32, gt=0, description="jobs of the array running at once")
    signal_delay_s: int = Field(90, gt=0, description="Slurm's warning before the time limit: the checkpoint's time")
    max_timeouts: int = Field(3, ge=0, description="how often a run may hit the time limit and be requeued")
    additional: dict[str, Any] = Field(default_factory=dict, description="further sbatch options: {account: x}")


def slurm_settings(spec: SlurmSpec, flags: dict[str, Any]) -> SlurmSpec:
    """The experiment's slurm settings with the command line's flags over them."""
    data = spec.model_dump()
    data["additional"] = data["additional"] | flags.pop("additional", {})
    try:
        return SlurmSpec.model_validate(data | flags, strict=False)
    except ValidationError as error:
        raise SpecError.of(error, "slurm settings", SlurmSpec) from None


class SeedSpreadFrom(BaseModel):
    """`seed_sd: {from: pe}`: the seed sd pooled over another experiment's runs (its results directory's)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, allow_inf_nan=False)

    source: str = Field(alias="from", pattern=RUN_NAME.pattern, description="the experiment under the results root")


class Header(BaseModel):
    """The keys of an experiment file besides the spec sections."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    name: str = Field(pattern=RUN_NAME.pattern, description="the experiment's name; results go under it")
    description: str = ""
    extends: str | None = Field(None, description="a file whose baseline spec this one starts from")
    plugins: list[str] = Field(default_factory=list, description="modules or .py files that register parts")
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict, description="run name -> {dotted.key: value}")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted.key -> values; every combination runs")
    seeds: list[int] | None = Field(None, min_length=1, description="train every run once per seed (inherited)")
    lr_sweep: list[PositiveFloat] | None = Field(
        None, min_length=1, description="train every run at each of these peak learning rates (inherited)"
    )
    slurm: SlurmSpec | None = Field(None, description="Slurm settings for `ablate run --launcher slurm` (inherited)")
    margin: PositiveFloat | None = Field(
        None,
        description="the smallest ΔBLEU that matters, declared before looking: a row whose interval lies inside "
        "±margin is equivalent (two one-sided tests; docs/reports.md) (inherited)",
    )

    seed_sd: PositiveFloat | SeedSpreadFrom | None = Field(
        None,
        description="a seed spread to borrow where an arm has one seed: a sd in BLEU, taken as known, or {from: "
        "<experiment>}, pooled over that experiment's runs of 2 seeds or more; printed beside every verdict that "
        "uses it; without it such a row is undecided (1 seed) (docs/reports.md)",
    )

    @field_validator("seeds", "lr_sweep")
    @classmethod
    def _distinct(cls, values: list | None) -> list | None:
        if values is not None and len(set(values)) != len(values):
            raise ValueError(f"values repeat: {values}")
        return values


SECTIONS = tuple(RunSpec.model_fields)


@dataclass(frozen=True)
class Run:
    """One trainable configuration of an experiment."""

    name: str
    spec: RunSpec
    differences: dict[str, str]  # dotted key -> value, where this run differs from the baseline
    arm: str = ""  # in a learning-rate sweep, the run this is one rate of ("pre_ln" for "pre_ln,lr=0.001")
    lr: float | None = None  # in a learning-rate sweep, the peak rate

    def describe(self) -> str:
        return ", ".join(f"{key.split('.')[-1]}={value}" for key, value in self.differences.items()) or "-"


@dataclass
class Experiment:
    """A loaded experiment file: its baseline and every run, the baseline first."""

    path: Path
    name: str
    description: str
    runs: list[Run]
    plugins: list[str] = field(default_factory=list)
    seeds: list[int] | None = None
    slurm: SlurmSpec | None = None
    lr_sweep: list[float] | None = None
    margin: float | None = None  # BLEU: rows inside ±margin are equivalent (ablate.report.decide)
    seed_sd: float | SeedSpreadFrom | None = None  # borrowed for arms of one seed (ablate.sweep.design)

    @property
    def baseline(self) -> Run:
        return self.runs[0]

    @property
    def arms(self) -> list[str]:
        """The runs before a learning-rate sweep multiplied them, the baseline first."""
        return list(dict.fromkeys(run.arm or run.name for run in self.runs))

    def warnings(self) -> list[str]:
        """`FILE: run NAME: dotted.key: why` for what is valid but cannot do what it says (RunSpec.warnings), once
        for a warning every run shares."""
        seen: dict[str, list[str]] = {}
        for run in self.runs:
            for line in run.spec.warnings():
                seen.setdefault(line, []).append(run.name)
        return [f"{self.path}: {'every run' if len(names) == len(self.runs) else 'run ' + ', '.join(names)}: {line}"
                for line, names in seen.items()]  # fmt: skip

    def run(self, name: str) -> Run:
        for run in self.runs:
            if run.name == name:
                return run
        raise KeyError(f"{self.path}: no run named '{name}' (runs: {', '.join(r.name for r in self.runs)})")


def load_experiment(path: str | Path, overrides: Sequence[str] = (), lr_sweep: Sequence[float] | None = None
                    ) -> Experiment:  # fmt: skip
    """Loads, validates and expands an experiment file.

    `overrides` are `dotted.key=yaml` applied to every run; `lr_sweep` (`--lr-sweep`) replaces the file's.
    """
    path = Path(path)
    header, baseline, origins, plugins = _resolve(path, ())
    sets = parse_overrides(overrides)

    raw_runs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {"baseline": (baseline, {})}
    for name, changes in header.variants.items():
        raw_runs[_new_name(path, name, raw_runs, ("variants", name))] = (baseline, changes)
    for name, changes in _grid_runs(path, header.grid):
        raw_runs[_new_name(path, name, raw_runs, ("grid",))] = (baseline, changes)

    specs: dict[str, RunSpec] = {}
    errors = []
    for name, (data, changes) in raw_runs.items():
        where = ("variants", name) if name in header.variants else ("grid",)
        try:
            data = apply_overrides(data, changes, path, where)
            data = apply_overrides(data, sets, "--set", ())
            specs[name] = _validate(data, origins if name == "baseline" else {}, path,
                                    "" if name == "baseline" else f"run '{name}'", set_by(overrides))  # fmt: skip
        except SpecError as error:
            if name == "baseline":
                raise
            errors.append(error)
    if errors:
        raise SpecError.merge(errors)

    base = flatten(specs["baseline"], _spec_value)
    runs = [
        Run(name, spec, {k: v for k, v in flatten(spec, _spec_value).items() if base.get(k) != v})
        for name, spec in specs.items()
    ]
    rates = list(lr_sweep) if lr_sweep else header.lr_sweep
    if rates:
        runs = _swept(runs, rates, path)
    return Experiment(path, header.name, header.description, runs, plugins, header.seeds, header.slurm, rates,
                      header.margin, header.seed_sd)  # fmt: skip


def _swept(runs: list[Run], rates: list[float], where: Path) -> list[Run]:
    """Every run at every peak learning rate (the schedule's `lr`), named `<run>,lr=<rate>`."""
    out = []
    for run in runs:
        schedule = run.spec.training.schedule
        if "lr" not in type(schedule.params).model_fields:
            takes = [name for name, cls in SCHEDULE.declared.items() if "lr" in cls.Params.model_fields]
            why = f"run '{run.name}' has schedule '{schedule.name}', which takes no lr; sweep one that does: "
            raise SpecError.at(where, [Issue(("lr_sweep",), why + ", ".join(takes))])
        for rate in rates:
            data = run.spec.model_dump(mode="json")
            data["training"]["schedule"] = {"name": schedule.name, **dict(schedule.params), "lr": rate}
            spec = RunSpec.model_validate(data)
            differences = dict(run.differences)
            if "training.schedule" in differences:  # the arm's own schedule, at this rate
                differences["training.schedule"] = str(spec.training.schedule)
            else:
                differences["training.schedule.lr"] = f"{rate:g}"
            out.append(Run(f"{run.name},lr={rate:g}", spec, differences, run.name, rate))
    return out


def load_experiments(files: Sequence[str | Path], overrides: Sequence[str] = (),
                     lr_sweep: Sequence[float] | None = None) -> list[Experiment]:  # fmt: skip
    """Every file loaded; the problems of all of them reported together."""
    experiments, errors = [], []
    for file in files:
        try:
            experiments.append(load_experiment(file, overrides, lr_sweep))
        except SpecError as error:
            errors.append(error)
    if errors:
        raise SpecError.merge(errors)
    return experiments


def _new_name(path: Path, name: str, taken: dict, loc: tuple) -> str:
    if not RUN_NAME.match(name):
        raise SpecError.at(path, [Issue(loc, f"run name '{name}' may hold only letters, digits and . _ = , + -")])
    if name in taken:
        raise SpecError.at(path, [Issue(loc, f"a run named '{name}' exists already (the baseline is 'baseline')")])
    return name


def _resolve(path: Path, chain: tuple[Path, ...]) -> tuple[Header, dict[str, Any], dict[str, Path], list[str]]:
    """Reads `path` and what it extends: its header, the merged baseline sections, each key's file, plugins."""
    data = read_yaml(path)
    header_data = {k: v for k, v in data.items() if k not in SECTIONS}
    try:
        header = Header.model_validate(header_data)
    except ValidationError as error:
        issues = issues_from(error, Header)
        for i, issue in enumerate(issues):  # an unknown top-level key: suggest from sections too
            if len(issue.loc) == 1 and issue.msg.startswith("unknown key"):
                issues[i] = Issue(issue.loc, unknown_key(str(issue.loc[0]), [*Header.model_fields, *SECTIONS]))
        raise SpecError.at(path, issues) from None

    baseline: dict[str, Any] = {}
    origins: dict[str, Path] = {}
    plugins: list[str] = []
    if header.extends is not None:
        parent = (path.parent / header.extends).resolve()
        if parent in chain or parent == path.resolve():
            cycle = " -> ".join(p.name for p in (*chain, path.resolve(), parent))
            raise SpecError.at(path, [Issue(("extends",), f"extends forms a cycle: {cycle}")])
        if not parent.is_file():
            raise SpecError.at(path, [Issue(("extends",), f"no such file: {parent}")])
        inherited, baseline, origins, plugins = _resolve(parent, (*chain, path.resolve()))
        header = header.model_copy(update={
            "seeds": header.seeds or inherited.seeds, "slurm": header.slurm or inherited.slurm,
            "lr_sweep": header.lr_sweep or inherited.lr_sweep, "margin": header.margin or inherited.margin,
            "seed_sd": header.seed_sd or inherited.seed_sd,
        })  # fmt: skip

    for i, plugin in enumerate(header.plugins):
        plugins.append(load_plugin(plugin, path, ("plugins", i)))
    for section in SECTIONS:
        if section in data:
            if not isinstance(data[section], dict):
                raise SpecError.at(path, [Issue((section,), f"expected a mapping, got {data[section]!r}")])
            baseline[section] = merge(baseline.get(section, {}), data[section])
            origins.update({k: path for k in keys_of(data[section], (section,))})
    return header, baseline, origins, plugins


def set_by(overrides: Sequence[str]) -> dict[str, str]:
    """dotted key -> the `--set KEY=VALUE` that set it."""
    return {item.split("=", 1)[0].strip(): f"--set {item.strip()}" for item in overrides if "=" in item}


def _validate(data: dict[str, Any], origins: dict[str, Path], default_file: Path, context: str,
              sets: dict[str, str] | None = None) -> RunSpec:  # fmt: skip
    """The run's spec, or every problem named where it was made: the file that set the key, or the `--set` that set
    it or a key the problem names (`heads=4 does not divide d_model=255` is --set model.d_model's doing, not the
    file's that set heads)."""
    try:
        return RunSpec.model_validate(data)
    except ValidationError as error:
        lines = []
        for issue in issues_from(error, RunSpec):
            blamed = _set_blamed(issue, sets or {})
            file = blamed or next((origins[k] for k in _prefixes(issue.loc) if k in origins), default_file)
            lines += SpecError.at(file, [issue], context).lines
        raise SpecError(lines) from None


def _set_blamed(issue: Issue, sets: dict[str, str]) -> str | None:
    """The `--set` behind an issue: one that set its key (or a key above it), or one in its section whose key the
    message names."""
    for key in _prefixes(issue.loc):
        if key in sets:
            return sets[key]
    section = str(issue.loc[0]) if issue.loc else ""
    for key, given in sets.items():
        leaf = key.split(".")[-1]
        if key.split(".")[0] == section and re.search(rf"(?<![\w.]){re.escape(leaf)}(?![\w])", issue.msg):
            return given
    return None


def _prefixes(loc: tuple) -> list[str]:
    return [dotted(loc[:n]) for n in range(len(loc), 0, -1)]


def _grid_runs(path: Path, grid: dict[str, list[Any]]) -> list[tuple[str, dict[str, Any]]]:
    if not grid:
        return []
    for key, values in grid.items():
        if not values:
            raise SpecError.at(path, [Issue(("grid", key), "needs at least one value")])
    last = [key.split(".")[-1] for key in grid]
    labels = [short if last.count(short) == 1 else key for key, short in zip(grid, last, strict=True)]
    runs = []
    for combination in itertools.product(*grid.values()):
        name = ",".join(f"{label}={show(value)}" for label, value in zip(labels, combination, strict=True))
        runs.append((name, dict(zip(grid, combination, strict=True))))
    return runs


def _spec_value(value: Any) -> str:
    """A spec value as a run's differences show it: a part as `name(k=v)`, a string quoted."""
    return str(value) if isinstance(value, PartSpec) else repr(value) if isinstance(value, str) else str(value)


def experiment_schema() -> dict[str, Any]:
    """JSON Schema of an experiment file: the header keys and the spec sections, with every registered part."""
    schema = Header.model_json_schema()
    spec = RunSpec.model_json_schema()
    schema["properties"].update(spec["properties"])
    schema.setdefault("$defs", {}).update(spec.get("$defs", {}))
    schema["title"] = "ablate experiment"
    return schema
