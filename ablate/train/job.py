"""A job: one run of an experiment with one seed, in its own directory. What the runner hands a worker.

The record is the run directory's job.json (see ablate.rundir), with the resolved spec beside it in
config.yaml for people. Torch is not imported here: the sweep's parent reads and writes jobs too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.files import read_json, write_json, write_yaml
from ablate.record import Identity
from ablate.rundir import CONFIG, JOB, as_stored

if TYPE_CHECKING:
    from ablate.train.spec import RunSpec


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
    device: str = "cpu"  # where it trains: cpu or cuda (set by ablate.sweep.devices.place)
    gpus: int = 0  # GPUs of the run: one process a GPU, data-parallel when more than one
    gpu_ids: list[int] = field(default_factory=list)  # the visible GPUs the launcher gave it (CUDA_VISIBLE_DEVICES)
    runs_per_gpu: int = 1  # jobs the sweep let share its GPU (--runs-per-gpu): above 1 its speed may be a shared GPU's
    tensorboard: str | None = None  # a TensorBoard log directory for this run
    threads: int | None = None  # CPU threads (torch.set_num_threads); None: torch's default, every core
    cpu_ids: list[int] = field(default_factory=list)  # the CPU cores the launcher pinned it to (sched_setaffinity)
    arm: str = ""  # the run before a learning-rate sweep multiplied it; the run itself otherwise
    lr: float | None = None  # the swept peak learning rate, in a learning-rate sweep

    @property
    def label(self) -> str:
        return f"{self.run}/seed-{self.seed}"

    def run_spec(self) -> RunSpec:
        """The spec, validated again in this process, after importing the plugins that register its parts."""
        from ablate.registry import load_plugin
        from ablate.train.spec import RunSpec

        for i, plugin in enumerate(self.plugins):
            load_plugin(plugin, self.directory / JOB, ("plugins", i))
        return RunSpec.model_validate(as_stored(self.spec))  # a job.json of an earlier ablate: the run it was

    def identity(self) -> Identity:
        """What every result of this job starts from: who it is."""
        return Identity(
            experiment=self.experiment,
            run=self.run,
            seed=self.seed,
            differences=self.differences,
            describe=self.describe,
            config_hash=self.config_hash,
            arm=self.arm or self.run,
            lr=self.lr,
        )

    def save(self) -> None:
        write_yaml(self.directory / CONFIG, self.spec)
        write_json(self.directory / JOB, asdict(self) | {"directory": str(self.directory)})

    @classmethod
    def load(cls, directory: Path) -> Job:
        data = read_json(directory / JOB)
        return cls(**(data | {"directory": Path(data["directory"])}))
