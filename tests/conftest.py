import os
import subprocess
import sys
from pathlib import Path

import pytest

# CI runs the tests in two pytest-xdist workers on two cores, so a test's training shares the machine. OpenMP's threads
# then sleep at a barrier rather than spin there (no effect on results), and in-process tests use one thread each.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

from ablate.model.spec import ModelSpec
from ablate.model.transformer import build_model

ROOT = Path(__file__).resolve().parents[1]

# Tests read Multi30k from $ABLATE_DATA_DIR; CI sets it to ../shared/corpora, and so does this, when it is there.
if not os.environ.get("ABLATE_DATA_DIR") and (ROOT.parent / "shared" / "corpora").is_dir():
    os.environ["ABLATE_DATA_DIR"] = str(ROOT.parent / "shared" / "corpora")


@pytest.fixture(autouse=True, scope="session")
def _cache(tmp_path_factory):
    """Vocabularies are cached in a temporary directory, shared by the whole session."""
    os.environ["ABLATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


def tiny_spec(**changes) -> ModelSpec:
    """A model small enough for exact checks in milliseconds; `changes` as in YAML."""
    base = dict(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0, tying="none")
    return ModelSpec.model_validate(base | changes)


def tiny_model(vocab: int = 50, **changes):
    torch.manual_seed(0)
    return build_model(tiny_spec(**changes), vocab, vocab).eval()


def cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs `ablate ARGS` as a user types it; `env`: variables set on top of this process's."""
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=None if env is None else os.environ | env)  # fmt: skip


@pytest.fixture
def write(tmp_path):
    """write('name.yaml', text) -> path, in a fresh directory."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write


# The files that take longest, longest first (pytest --durations in a fresh clone, two workers). Under
# `--dist loadfile` a worker takes a whole file, in collection order, so these go first: the longest
# processing time first keeps one worker from running the slowest file last while the other is idle.
SLOWEST_FILES = ["test_check.py", "test_slurm_cluster.py", "test_budgets.py", "test_runner.py",
                 "test_checkpoints.py", "test_report.py", "test_comparisons.py", "test_decoding.py",
                 "test_precision.py", "test_run.py"]  # fmt: skip


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order
