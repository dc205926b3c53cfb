"""The run directory of one job (a run with one seed): every file name, status, exit code and reader. No torch.

results/<experiment>/design.json   how the experiment's rows are judged (ablate.report.decide), if declared
results/<experiment>/summary.md, summary.csv   the sweep's table of every job (ablate.sweep.runner); the report
                                   lists runs in summary.csv's order (`summary_order`)
results/<experiment>/runs/<run>/seed-<n>/
    job.json          the job record the runner hands a worker (ablate.train.job): resolved spec, config hash, device
    config.yaml       the resolved spec, for people
    metrics.jsonl     one JSON object a line: training steps, validations, phases (read with `read_metrics`)
    diagnostics.jsonl one JSON object a measurement: gradient norms, attention entropy and logits, norms
                      (ablate.model.diagnostics measures them; read with `read_diagnostics`)
    result.json       everything measured, written last (read with `read_result`)
    hypotheses/       <split>.txt, one detokenised translation a line; <split>.bleu.json, each line's BLEU
                      statistics against the references (ablate.bleu_statistics), so that a report needs no corpus
    checkpoints/      last-<step>.pt and last.json (its step, config hash and file), step-<n>.pt (see
                      ablate.train.checkpoints)
    budgets/<b>/      a budget point before the run's end (evaluation.budgets; ablate.train.budgets):
                      point.json (its scores, written last), hypotheses/<split>.txt, and for a wsd cooldown
                      branch while it trains, its own checkpoints/ and metrics.jsonl
    worker.log        the worker's own output
    slurm.json        the Slurm job training it (--launcher slurm): its id and submitit's folder, so a second
                      `ablate run` follows a queued job instead of submitting it again
    .lock             held (flock) by the process training this job

A job whose spec and seed (its config hash) already finished elsewhere under the same results root is
not trained again: `reuse` copies that result, its hypotheses and metrics, and result.json names the
source in `reused_from`.

Everything that reads or writes a run directory (worker, launchers, runner, report, check, the live
view) goes through this module.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ablate.errors import SpecError
from ablate.files import read_json, write_json, write_text
from ablate.record import BudgetPoint, DesignRecord, Identity, RunResult, SpeedRecord, Validation

R = TypeVar("R", bound=BaseModel)

JOB, CONFIG, METRICS, RESULT = "job.json", "config.yaml", "metrics.jsonl", "result.json"
DIAGNOSTICS = "diagnostics.jsonl"
HYPOTHESES, CHECKPOINTS, LOG, LOCK = "hypotheses", "checkpoints", "worker.log", ".lock"
BLEU_STATISTICS = "bleu.json"  # hypotheses/<split>.bleu.json, beside hypotheses/<split>.txt
SLURM_JOB = "slurm.json"
DESIGN = "design.json"  # beside runs/, one an experiment
SPEED = {"cpu": "speed.json", "cuda": "speed.cuda.json"}  # beside runs/: `ablate bench`, one a kind of device
SUMMARY_MD, SUMMARY_CSV = "summary.md", "summary.csv"  # beside runs/: the sweep's table
BUDGET_POINTS, POINT = "budgets", "point.json"
CHECKPOINT_INFO = f"{CHECKPOINTS}/last.json"  # names the last checkpoint: its step, config hash and state file
EARLIER_STATE = "last.pt"  # the state file of an earlier ablate's checkpoint, whose last.json names none
STALE = ".stale-"  # seed-<n>.stale-<hash>: an earlier result set aside when the spec changed


class Exit(IntEnum):
    """A worker's exit codes (and `ablate run`'s: 0 all done, 1 some failed, 2 bad input, 130 interrupted)."""

    COMPLETED = 0  # completed or diverged
    FAILED = 1
    USER_ERROR = 2  # bad input, the same for every run: the sweep stops
    BUSY = 3
    INTERRUPTED = 130


# How the spec's fields count towards the hash is marked on each field (ablate.config: BOOKKEEPING, ADDED). The run
# directory is read without the spec's classes (the report never imports torch), so the hash reads this copy of
# the marks; tests/test_record.py fails when it and the fields' marks differ.
#
# Keys that change neither the trained model nor its scores, left out of the config hash. With checkpoint
# averaging on, the checkpoints are what gets averaged, so their interval counts.
BOOKKEEPING = {("training", "checkpoint_every"), ("training", "peak_tflops"), ("training", "diagnostics_every"),
               ("training", "sync_every"), ("training", "cuda_graphs")}  # fmt: skip

# Keys added after results were committed, left out of the hash at the value runs had before them (their default,
# unless `config.added(was=...)` says otherwise) so that earlier hashes hold: a run that does not use them is the
# run it was.
ADDED = {("evaluation", "average_checkpoints"): 1, ("training", "max_target_tokens"): None,
         ("training", "max_flops"): None, ("training", "max_seconds"): None, ("data", "max_train_length"): None,
         ("evaluation", "length_buckets"): [10, 20, 30], ("model", "projection"): "full",
         ("evaluation", "budgets"): None, ("training", "adam_kernel"): "default",
         ("model", "dropout_sampler"): "bernoulli", ("training", "cross_entropy"): "torch",
         ("training", "early_stopping"): None, ("evaluation", "select"): "last",
         ("training", "shape_buckets"): None, ("model", "d_v"): None,
         ("evaluation", "length_penalty_form"): "gnmt", ("tokenizer", "max_sentences"): 1_000_000,
         ("tokenizer", "merges"): None, ("data", "lowercase"): False, ("data", "tokenize"): "none",
         ("tokenizer", "style"): "metaspace"}  # fmt: skip


# Keys that change only how a run's trained weights are decoded and scored at its end: a finished run whose spec
# changes in these alone is decoded again from its last checkpoint (`decoding_changes`, `set_aside_for_decoding`), not
# retrained. Not max_extra_len, batch_size or lowercase: training's validations decode greedily with them (valid BLEU,
# which early stopping may read).
DECODING = {("evaluation", "beam_size"), ("evaluation", "length_penalty"), ("evaluation", "length_penalty_form"),
            ("evaluation", "length_buckets"), ("data", "test")}  # fmt: skip


def as_stored(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec stored before some ADDED keys existed, with each missing one at the value runs had then: validated
    today, it is the run it was (a field whose default has since changed, `config.added(was=...)`, included)."""
    data = copy.deepcopy(spec)
    for (section, key), was in ADDED.items():
        if isinstance(data.get(section), dict):
            data[section].setdefault(key, copy.deepcopy(was))
    return data


def config_hash(spec: dict[str, Any]) -> str:
    """A short hash of a resolved spec (as `RunSpec.model_dump(mode='json')`), seed included."""
    data = copy.deepcopy(spec)
    averaging = (data.get("evaluation") or {}).get("average_checkpoints", 1) > 1
    for section, key in BOOKKEEPING:
        if not (averaging and key == "checkpoint_every"):
            data.get(section, {}).pop(key, None)
    for (section, key), default in ADDED.items():
        if key in data.get(section, {}) and data[section][key] == default:
            del data[section][key]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def read_result(directory: Path) -> RunResult | None:
    """result.json, or None when there is none (or it cannot be read). One that is not a run record (a field
    misspelt or of the wrong type) is an error naming the file and the field, never taken for a missing result."""
    return _read_record(directory / RESULT, RunResult)


def _read_record(path: Path, model: type[R]) -> R | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise SpecError.of(error, path, model, "not a run record of this version of ablate") from None


def write_result(directory: Path, result: RunResult) -> None:
    """result.json, atomically: written last, so that a run cut short is not taken for a result."""
    write_json(directory / RESULT, result.dump())


def read_config(directory: Path) -> dict[str, Any]:
    """config.yaml: the resolved spec as stored for people (an empty file reads as {}). Raises OSError or
    yaml.YAMLError when it cannot be read."""
    import yaml

    return yaml.safe_load((directory / CONFIG).read_text(encoding="utf-8")) or {}


def summary_order(experiment: Path) -> list[str]:
    """The runs in the order of the experiment's summary.csv; [] when there is none or it cannot be read."""
    import csv

    with (contextlib.suppress(OSError, csv.Error, UnicodeDecodeError),
          (experiment / SUMMARY_CSV).open(encoding="utf-8", newline="") as file):  # fmt: skip
        return [row["run"] for row in csv.DictReader(file) if row.get("run")]
    return []


def stored_hash(directory: Path) -> str | None:
    """The config hash of what a run directory holds: job.json's.

    Directories made before job records existed (none are left in results/) hold config.yaml alone;
    their hash is taken from it.
    """
    with contextlib.suppress(OSError, ValueError, KeyError):
        return read_json(directory / JOB)["config_hash"]
    import yaml

    with contextlib.suppress(OSError, yaml.YAMLError, AttributeError):
        config = read_config(directory)
        return config_hash(config) if config else None
    return None


def state_name(step: int) -> str:
    """The file in checkpoints/ of the trainer's state at `step` (ablate.train.checkpoints.save)."""
    return f"last-{step}.pt"


@dataclass(frozen=True)
class Checkpoint:
    step: int
    state: Path  # the trainer's whole state at `step`


def last_checkpoint(directory: Path, expected_hash: str | None) -> Checkpoint | None:
    """The run's last checkpoint, when there is one made with this config (`expected_hash`; None: any).

    last.json names it, and is written after its state file, atomically: a kill between the two leaves the
    checkpoint before, whole, and its state file with it (the state and a step read apart could disagree)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):  # AttributeError: not a dict
        info = read_json(directory / CHECKPOINT_INFO)
        name = info.get("state", EARLIER_STATE)
        step = int(info["step"])
        if name not in (state_name(step), EARLIER_STATE):
            return None  # not a file this module writes: a crafted last.json reads no file outside checkpoints/
        state = directory / CHECKPOINTS / name
        if expected_hash in (None, info["config_hash"]) and state.is_file():
            return Checkpoint(step, state)
    return None


def spec_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The keys ("evaluation.beam_size", ...) in which two resolved specs differ, BOOKKEEPING left out; an ADDED key
    missing from either reads at the value runs had before it."""
    before, after = as_stored(before), as_stored(after)
    return sorted(f"{section}.{key}" for section in before.keys() | after.keys()
                  for key in (before.get(section) or {}).keys() | (after.get(section) or {}).keys()
                  if (section, key) not in BOOKKEEPING
                  and (before.get(section) or {}).get(key) != (after.get(section) or {}).get(key))  # fmt: skip


def earlier_decodings(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The earlier results of a job kept beside it (seed-<n>.stale-<hash>) whose spec differs from the job's only in
    its decoding (DECODING): the same training, scored another way, as a decoding again leaves them. Each with the
    keys that differ ("evaluation.length_penalty") at the earlier spec's values. Reads only; a copy that cannot be
    read is left out."""
    found = []
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        spec = read_json(directory / JOB)["spec"]
        for stale in sorted(directory.parent.glob(f"{directory.name}{STALE}*")):
            if stale.name.endswith(".partial") or not (stale / RESULT).is_file():
                continue  # .partial: a set-aside cut short, whose whole copy is still in the job directory
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
                earlier = as_stored(read_json(stale / JOB)["spec"])
                changed = spec_changes(earlier, spec)
                if changed and all(tuple(key.split(".", 1)) in DECODING for key in changed):
                    found.append((stale, {key: earlier[key.split(".")[0]][key.split(".")[1]] for key in changed}))
    return found


def _decoding_only(before: dict[str, Any], after: dict[str, Any]) -> list[str] | None:
    """The keys in which two resolved specs differ, where those change only the decoding (DECODING) and neither has
    budget points (decoded during training, from weights no longer kept); else None."""
    changed = spec_changes(before, after)
    if not changed or any(tuple(key.split(".", 1)) not in DECODING for key in changed):
        return None
    if any((as_stored(spec).get("evaluation") or {}).get("budgets") for spec in (before, after)):
        return None
    return changed


def decoding_changes(directory: Path, spec: dict[str, Any]) -> list[str] | None:
    """The keys ("evaluation.beam_size", ...) in which `spec` (resolved, as `RunSpec.model_dump(mode='json')`)
    differs from the spec of the run directory's result, when they change only its decoding (DECODING) and its
    trained weights can be decoded again: a completed result, the last checkpoint at its end (made with its
    config, or already with `spec`'s, by a decoding again cut short), no budget points. Else None. Reads only."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        job = read_json(directory / JOB)
        changed = _decoding_only(job["spec"], spec)
        if changed is None:
            return None
        result = read_result(directory)
        info = read_json(directory / CHECKPOINT_INFO)
        found = last_checkpoint(directory, None)
        if (result is None or not result.ok or found is None or found.step != result.steps
                or info["config_hash"] not in (job["config_hash"], config_hash(spec))):  # fmt: skip
            return None
        return changed
    return None


def training_goes_on(directory: Path, spec: dict[str, Any]) -> tuple[list[str], int] | None:
    """For a run not finished whose spec (resolved) differs from its own only in its decoding (DECODING), the keys
    that differ and the step of its last checkpoint, made with its config: training is the same under either
    spec, so it goes on from there under the new one (`adopt_checkpoint`) rather than starting over. Else None.
    Budget points are decoded during training: a run with them starts over. Reads only."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        job = read_json(directory / JOB)
        changed = _decoding_only(job["spec"], spec)
        if changed is None:
            return None
        result = read_result(directory)
        found = last_checkpoint(directory, job["config_hash"])
        if (result is not None and result.finished) or found is None:
            return None
        return changed, found.step
    return None


def adopt_checkpoint(directory: Path, new_hash: str) -> None:
    """Makes a run's last checkpoint that of the config `new_hash` (see `training_goes_on`): last.json alone is
    rewritten, atomically, so a kill leaves the checkpoint under one config or the other, whole."""
    write_json(directory / CHECKPOINT_INFO, read_json(directory / CHECKPOINT_INFO) | {"config_hash": new_hash})


def set_aside_for_decoding(directory: Path, new_hash: str) -> Path:
    """Makes a finished run ready to be decoded again under the config `new_hash` (see `decoding_changes`); returns
    where its earlier result went.

    Everything but its checkpoints is copied to seed-<n>.stale-<hash> (nothing is lost). Then the end's
    validation leaves metrics.jsonl (it is logged again), hypotheses/ goes, last.json takes the new hash, and
    result.json goes last: a kill at any point leaves either the earlier result, decoded again by the next
    `ablate run`, or a checkpoint of the new config, which it resumes (at the end: straight to decoding)."""
    stale = stale_path(directory)
    partial = stale.with_name(stale.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(directory, partial, ignore=shutil.ignore_patterns(CHECKPOINTS, LOCK))
    partial.rename(stale)
    result = read_result(directory)
    end = result.steps if result is not None else None
    records = (directory / METRICS).read_text(encoding="utf-8").splitlines() if (directory / METRICS).is_file() else []
    last = max((i for i, line in enumerate(records) if '"valid_loss"' in line), default=None)
    if last is not None and json.loads(records[last]).get("step") == end:
        write_text(directory / METRICS, "".join(f"{line}\n" for i, line in enumerate(records) if i != last))
    shutil.rmtree(directory / HYPOTHESES, ignore_errors=True)
    info = read_json(directory / CHECKPOINT_INFO)
    write_json(directory / CHECKPOINT_INFO, info | {"config_hash": new_hash})
    (directory / RESULT).unlink()
    return stale


def checkpoint_step(directory: Path, expected_hash: str) -> int | None:
    """The step of the run's last checkpoint, when there is one made with this config."""
    found = last_checkpoint(directory, expected_hash)
    return None if found is None else found.step


def parse_metrics(lines: str) -> list[dict[str, Any]]:
    """JSON lines to records; a line that is not JSON (cut off by a kill) is skipped."""
    records = []
    for line in lines.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def read_metrics(directory: Path) -> list[dict[str, Any]]:
    """Every record of metrics.jsonl: steps (`loss`), validations (`valid_loss`), phases (`phase`)."""
    with contextlib.suppress(OSError):
        return parse_metrics((directory / METRICS).read_text(encoding="utf-8"))
    return []


class MetricsTail:
    """Reads the records appended to a run's metrics.jsonl since the last call (the live view's reader)."""

    def __init__(self, directory: Path):
        self.path, self.offset = directory / METRICS, 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n") + 1  # a line being written is read next time
        self.offset += end
        return parse_metrics(chunk[:end].decode("utf-8", errors="replace"))


def read_diagnostics(directory: Path) -> list[dict[str, Any]]:
    """Every record of diagnostics.jsonl, by step: {"step", "seconds", "grad_norm": {sublayer: norm},
    "attention_entropy": {attention: [per head]}, "max_logit": {attention: logit},
    "residual_norm": {layer: norm}, "logits_norm": norm} (ablate.model.diagnostics says what each is)."""
    with contextlib.suppress(OSError):
        return parse_metrics((directory / DIAGNOSTICS).read_text(encoding="utf-8"))
    return []


def read_validations(directory: Path) -> list[Validation]:
    """metrics.jsonl's validations (its records with a valid loss), in the order they were logged."""
    fields = Validation.model_fields
    return [Validation.model_validate({key: value for key, value in record.items() if key in fields})
            for record in read_metrics(directory) if "valid_loss" in record]  # fmt: skip


def diagnostics_seconds(directory: Path) -> float:
    """What measuring the diagnostics took, over every record of diagnostics.jsonl."""
    return sum(record.get("seconds", 0.0) for record in read_diagnostics(directory))


def append_metrics(directory: Path, record: dict[str, Any], name: str = METRICS) -> None:
    """Appends one record to metrics.jsonl (or, with `name`, to diagnostics.jsonl)."""
    with (directory / name).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def truncate_metrics(directory: Path, step: int | None) -> None:
    """Keeps the logs up to a checkpoint: what came after it will be logged again by the resumed run. With no
    checkpoint (None), nothing is kept: a run that starts over logs again from step 0, and an attempt that
    died before its first checkpoint leaves no records behind to be read as this run's."""
    for name in (METRICS, DIAGNOSTICS):
        path = directory / name
        if step is None:
            path.unlink(missing_ok=True)
        if not path.is_file():
            continue
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("step", 0) <= step and "phase" not in record:
                    kept.append(line)
        write_text(path, "".join(f"{line}\n" for line in kept))


def hypotheses_path(directory: Path, split: str) -> Path:
    return directory / HYPOTHESES / f"{split}.txt"


def read_hypotheses(directory: Path, split: str, budget: float | None = None) -> list[str] | None:
    """A split's translations at the run's end, or at one of its budget points."""
    path = hypotheses_path(directory if budget is None else budget_dir(directory, budget), split)
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else None


def statistics_path(directory: Path, split: str) -> Path:
    """The BLEU statistics of a split's hypotheses (ablate.bleu_statistics reads and writes them), beside them:
    copied, set aside and removed with them."""
    return directory / HYPOTHESES / f"{split}.{BLEU_STATISTICS}"


def budget_name(budget: float) -> str:
    """A budget point as a directory name and a key: 2000, 1.5e+18, 0.5."""
    return str(int(budget)) if float(budget).is_integer() and abs(budget) < 1e15 else f"{budget:g}"


def budget_dir(directory: Path, budget: float) -> Path:
    return directory / BUDGET_POINTS / budget_name(budget)


def read_point(directory: Path, budget: float) -> BudgetPoint | None:
    """A budget point's record (point.json), once it has been scored."""
    return _read_record(budget_dir(directory, budget) / POINT, BudgetPoint)


def write_point(directory: Path, point: BudgetPoint) -> None:
    """A budget point's record (point.json), written once it is scored: a resumed run never decodes it again."""
    write_json(budget_dir(directory, point.budget) / POINT, point.dump())


RUNS = "runs"  # <experiment>/runs/<run>/seed-<n>: every job's directory


def job_dir(experiment: Path, run: str, seed: int) -> Path:
    """Where one run's seed keeps its files: <experiment>/runs/<run>/seed-<seed>."""
    return experiment / RUNS / run / f"seed-{seed}"


def run_dirs(experiment: Path) -> list[Path]:
    """The experiment's run directories (<experiment>/runs/<run>), by name; none where it has no runs yet."""
    runs = experiment / RUNS
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def is_experiment(directory: Path) -> bool:
    """Whether `directory` holds an experiment's runs (its runs/ directory)."""
    return (directory / RUNS).is_dir()


def seed_dirs(run_dir: Path) -> list[Path]:
    """The job directories of one run (seed-<n>), by seed, stale ones left out."""
    found = [p for p in run_dir.glob("seed-*") if STALE not in p.name and p.is_dir()]
    return sorted(found, key=_seed_number)


def _seed_number(path: Path) -> tuple[int, str]:
    number = path.name.removeprefix("seed-").split(".")[0]
    return (int(number), path.name) if number.isdigit() else (1 << 30, path.name)


def stale_path(directory: Path) -> Path:
    """Where an earlier result goes when the spec has changed: seed-<n>.stale-<hash>[-k], never over another."""
    stale = directory.with_name(f"{directory.name}{STALE}{stored_hash(directory)}")
    n = 1
    while stale.exists():
        stale, n = directory.with_name(f"{directory.name}{STALE}{stored_hash(directory)}-{n}"), n + 1
    return stale


def run_directories(results: Path) -> list[Path]:
    """Every job directory under `results` (<experiment>/runs/<run>/seed-<n>), in path order, set-aside stale
    results left out."""
    return [d for d in sorted(results.glob(f"*/{RUNS}/*/seed-*")) if STALE not in d.name and d.is_dir()]


def has_results(experiment: Path) -> bool:
    """Whether any job of the experiment directory (<experiment>/runs/<run>/seed-<n>) has a result.json."""
    return any((d / RESULT).is_file() for d in run_directories(experiment.parent) if d.parents[2] == experiment)


def finished_jobs(results: Path) -> dict[str, Path]:
    """Config hash -> a job directory under `results` (<experiment>/runs/<run>/seed-<n>) that completed or diverged.

    What a sweep may reuse instead of training the same spec and seed again. Reused results are not
    sources themselves, so every copy names the job that trained.
    """
    found: dict[str, Path] = {}
    for directory in run_directories(results):
        result = read_result(directory)
        if result and result.finished and not result.reused_from:
            found.setdefault(result.config_hash or stored_hash(directory) or "", directory)
    found.pop("", None)
    return found


def reuse(source: Path, target: Path, identity: Identity, results: Path) -> RunResult:
    """Copies a finished job's result, hypotheses, metrics and diagnostics into `target`, relabelled as `identity`.

    `target` holds its own job.json and config.yaml already; result.json is written last, so a copy
    cut short is not taken for a result.
    """
    for name in (HYPOTHESES, BUDGET_POINTS):
        if (source / name).is_dir():
            shutil.copytree(
                source / name, target / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns(CHECKPOINTS)
            )
    for name in (METRICS, DIAGNOSTICS):
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    where = str(source.relative_to(results)) if source.is_relative_to(results) else str(source)
    result = RunResult.of(
        _read_record(source / RESULT, RunResult),
        identity,
        reused_from=where,
        note=f"reused: the same spec and seed trained as {where}",
    )
    write_result(target, result)
    return result


def read_design(experiment: Path) -> DesignRecord | None:
    """results/<experiment>/design.json, or None where none was declared."""
    return _read_record(experiment / DESIGN, DesignRecord)


def write_design(experiment: Path, design: DesignRecord) -> None:
    write_json(experiment / DESIGN, design.model_dump(exclude_none=True))


def read_speeds(experiment: Path) -> list[SpeedRecord]:
    """The experiment's benches (`ablate bench`): the CPU's first, then the GPU's, those there are."""
    found = (_read_record(experiment / name, SpeedRecord) for name in SPEED.values())
    return [record for record in found if record is not None]


def write_speed(experiment: Path, record: SpeedRecord) -> Path:
    """speed.json (speed.cuda.json for a GPU's), atomically: a bench replaces the last one of its kind of device."""
    path = experiment / SPEED[record.device_type]
    write_json(path, record.dump())
    return path


def write_slurm_job(directory: Path, job_id: str, folder: Path) -> None:
    write_json(directory / SLURM_JOB, {"job_id": job_id, "folder": str(folder), "submitted_at": time.time()})


def read_slurm_job(directory: Path) -> dict[str, Any] | None:
    """The Slurm job last submitted for this run ({"job_id": "12_3", "folder": ...}), if any."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        record = read_json(directory / SLURM_JOB)
        return record if isinstance(record.get("job_id"), str) else None
    return None


class RunLock:
    """An exclusive lock on a run directory, held while a worker trains it (released when the process dies)."""

    def __init__(self, directory: Path):
        self.path = directory / LOCK
        self.fd: int | None = None

    def acquire(self, wait: bool) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def held_elsewhere(self) -> bool:
        """Whether another process holds the lock now (this one takes it for a moment to see)."""
        if self.fd is not None:
            return False
        if not self.acquire(wait=False):
            return True
        self.release()
        return False

    def holder(self) -> str:
        with contextlib.suppress(OSError):
            return self.path.read_text().strip()
        return "?"
