"""A job: one run of an experiment with one seed, in its own directory. What the runner hands a worker.

results/<experiment>/runs/<run>/seed-<n>/job.json         this record (the resolved spec, its hash, the device)
                                        config.yaml      the resolved spec, for people
                                        metrics.jsonl    training and validation log
                                        result.json      everything measured (written last)
                                        checkpoints/     last.pt and last.json (its step and config hash)
                                        worker.log       the worker's own output
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ablate.experiment import Experiment, Run, load_plugin
from ablate.results import read_json, write_json, write_yaml
from ablate.spec import RunSpec

JOB, CONFIG, RESULT, METRICS = "job.json", "config.yaml", "result.json", "metrics.jsonl"
LOG, LOCK = "worker.log", ".lock"
CHECKPOINT, CHECKPOINT_INFO = "checkpoints/last.pt", "checkpoints/last.json"

# Keys that change neither the trained model nor its scores, left out of the config hash (the resume
# test shows that saving checkpoints does not change training).
BOOKKEEPING = {("training", "checkpoint_every")}


def config_hash(spec: dict[str, Any]) -> str:
    """A short hash of a resolved spec (as `RunSpec.model_dump(mode='json')`), seed included."""
    data = copy.deepcopy(spec)
    for section, key in BOOKKEEPING:
        data.get(section, {}).pop(key, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Job:
    experiment: str
    run: str
    seed: int
    directory: Path
    spec: dict[str, Any]  # RunSpec.model_dump(mode="json"), with this seed
    differences: dict[str, str]
    describe: str
    plugins: list[str]
    config_hash: str
    note: str = ""  # why it runs again, when it does
    device: str = "cpu"  # what the scheduler gave it: cpu or cuda
    gpus: int = 0  # GPUs of the run: one process a GPU, data-parallel when more than one
    tensorboard: str | None = None  # a TensorBoard log directory for this run
    threads: int | None = None  # CPU threads (torch.set_num_threads); None: torch's default, every core

    @classmethod
    def of(cls, experiment: Experiment, run: Run, seed: int, root: Path) -> Job:
        spec = run.spec.model_copy(update={"training": run.spec.training.model_copy(update={"seed": seed})})
        data = spec.model_dump(mode="json")
        return cls(experiment.name, run.name, seed, root / "runs" / run.name / f"seed-{seed}", data,
                   run.differences, run.describe(), experiment.plugins, config_hash(data))  # fmt: skip

    @property
    def label(self) -> str:
        return f"{self.run}/seed-{self.seed}"

    def run_spec(self) -> RunSpec:
        """The spec, validated again in this process, after importing the plugins that register its parts."""
        for i, plugin in enumerate(self.plugins):
            load_plugin(plugin, self.directory / JOB, ("plugins", i))
        return RunSpec.model_validate(self.spec)

    def save(self) -> None:
        write_yaml(self.directory / CONFIG, self.spec)
        write_json(self.directory / JOB, asdict(self) | {"directory": str(self.directory)})

    @classmethod
    def load(cls, directory: Path) -> Job:
        data = read_json(directory / JOB)
        return cls(**(data | {"directory": Path(data["directory"])}))


def stored_hash(directory: Path) -> str | None:
    """The config hash of what a run directory holds: from result.json, else job.json, else config.yaml."""
    for name in (RESULT, JOB):
        with contextlib.suppress(OSError, ValueError, KeyError):
            return read_json(directory / name)["config_hash"]
    with contextlib.suppress(OSError, yaml.YAMLError):  # results written before hashes were kept
        return config_hash(yaml.safe_load((directory / CONFIG).read_text(encoding="utf-8")))
    return None


def checkpoint_step(directory: Path, expected_hash: str) -> int | None:
    """The step of the run's last checkpoint, when there is one made with this config."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        info = read_json(directory / CHECKPOINT_INFO)
        if info["config_hash"] == expected_hash and (directory / CHECKPOINT).is_file():
            return int(info["step"])
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

    def holder(self) -> str:
        with contextlib.suppress(OSError):
            return self.path.read_text().strip()
        return "?"
