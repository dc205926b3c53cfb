"""A reference file, results/reference/<name>.yaml: a baseline's spec, what its seeds measured, and the tolerances.

It keeps a baseline recipe's resolved spec, what each of several seeds measured (parameters, BLEU, chrF, the
validation loss at fixed steps, a hash of the test hypotheses), and the machine it was measured on.
`ablate check --update` measures it again and rewrites it: on purpose only. A file `dump` wrote, `load` reads
and `dump` writes back byte for byte (a hand-written one gets dump's header and layout).

On another machine each metric may move by `Tolerance.multiple` seed-to-seed standard deviations (or its
floor), where the multiple is the Student t prediction interval for one new seed against the seeds' mean at
the reference's false-alarm rate, split over the metrics (Bonferroni): k = t(1 - a / 2m; n - 1) * sqrt(1 + 1/n).
results/reference/README.md works it through.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ablate.errors import SpecError, UserError, did_you_mean
from ablate.files import read_yaml
from ablate.record import RunResult

REFERENCES = Path("results") / "reference"


class SeedRun(BaseModel):
    """What one seed of the reference measured."""

    model_config = ConfigDict(extra="forbid")

    bleu: float
    chrf: float
    valid_loss: dict[int, float] = Field(description="validation loss at fixed steps")
    hypotheses: str = Field(description="sha256 of the test split's hypotheses file")
    run: str | None = Field(None, description="the finished run it was read from (`--update --from-results`)")
    device: str | None = Field(None, description="where it trained, when the seeds trained on several devices")

    def curve(self, steps: list[int]) -> float:
        """The validation loss curve's mean over `steps` (`shared_steps`): one number that sees the whole run."""
        return statistics.fmean(self.valid_loss[step] for step in steps)


def shared_steps(curves: list[dict[int, float]]) -> list[int] | None:
    """The validation steps of every curve up to the end of the one that ended first, where they all validated at
    the same steps: early stopping ends seeds at different steps, and their curves are compared over the stretch
    that all of them trained. A curve's last point is its end's model, the mean of its checkpoints where the run
    averages them, so that end is left out where another curve goes on: each point compared is of the same kind.
    None where they validated at different steps before that end (another validate_every, or a curve with no
    step)."""
    if not curves or not all(curves):
        return None
    end = min(max(curve) for curve in curves)
    beyond = any(max(curve) > end for curve in curves)
    stretches = [sorted(step for step in curve if step < end or (step == end and not beyond)) for curve in curves]
    if not stretches[0]:
        return None
    return stretches[0] if all(stretch == stretches[0] for stretch in stretches) else None


@dataclass
class Measured:
    """One seed as the check measured it: its run record (ablate.record), the validation losses its metrics.jsonl
    logged, and the sha256 of its test split's hypotheses."""

    result: RunResult
    valid_losses: dict[int, float] = field(default_factory=dict)
    hypotheses_sha256: str | None = None
    run: str | None = None  # the finished run it was read from, when not trained by the check

    def seed_run(self, split: str, device: bool = False) -> SeedRun | None:
        """The seed as a reference keeps it, with the device it trained on when `device` (the seeds trained on
        several); None for a run with no scores or losses to compare (it failed before decoding): the one place
        that reads its scores and losses."""
        score = self.result.scores.get(split)
        if score is None or not self.valid_losses or self.hypotheses_sha256 is None:
            return None
        return SeedRun(bleu=score.bleu, chrf=score.chrf, valid_loss=dict(sorted(self.valid_losses.items())),
                       hypotheses=self.hypotheses_sha256, run=self.run,
                       device=self.result.device if device else None)  # fmt: skip


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: str
    params: int
    seeds: dict[int, SeedRun] = Field(description="each seed's measurements; the check re-runs the first")

    @field_validator("seeds")
    @classmethod
    def _curves_share_their_steps(cls, seeds: dict[int, SeedRun]) -> dict[int, SeedRun]:
        if shared_steps([run.valid_loss for run in seeds.values()]) is None:
            raise ValueError("the seeds' valid_loss curves must hold the same steps up to where the first ends")
        return seeds

    @property
    def first(self) -> int:
        return min(self.seeds)


NOISE_METRICS = ("valid loss curve", "BLEU", "chrF")  # judged within seed noise on another machine, in this order


def metric(run: SeedRun, name: str, steps: list[int]) -> float:
    """A noise metric of one seed; the loss curve's over `steps`."""
    return run.curve(steps) if name == "valid loss curve" else {"BLEU": run.bleu, "chrF": run.chrf}[name]


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
    mode: Literal["exact", "noise"] = Field(
        "exact",
        description="how a check on the machine that made it judges: exact (elsewhere always within seed noise), or "
        "noise (everywhere: its seeds came from several machines, or bit-equality is not what it guards)",
    )
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
            raise UserError(f"{root}: no reference files (*.yaml); run ablate check from the repository root, where "
                            "results/reference/ is, or name a reference file")  # fmt: skip
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
    try:
        return Reference.model_validate(read_yaml(path))
    except ValidationError as error:
        raise SpecError.of(error, path, Reference) from None


def dump(ref: Reference) -> str:
    """The reference as YAML, in the order people read it."""
    data = ref.model_dump(mode="json", exclude_none=True)
    if "mode" not in ref.model_fields_set:
        del data["mode"]  # files written before `mode` existed leave it out
    return "# Made and rewritten by `ablate check --update`; see results/reference/README.md.\n" + yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True, width=100
    )
