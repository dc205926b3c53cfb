import fcntl
import json
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

# CI runs the tests in two pytest-xdist workers on two cores. Each worker takes its own share of the cores
# (sched_setaffinity), and the runs a test starts inherit it: ablate sees a 1-core machine in each worker and
# trains on that core, one thread a run, so the two workers' runs never share a core (without this, a test's
# run of 2 threads on both cores met the other worker's at every OpenMP barrier; in fresh clones on one Zen 4,
# pytest took 15:36 unpinned, and 14:32 and 16:08 pinned: within this machine's run-to-run noise). Tests of
# what ablate does with several cores hand ALL_CORES to the process they start (`cli(..., cores=ALL_CORES)`).
# In-process tests use one thread. OpenMP threads sleep at a barrier rather than spin there (no effect on results).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

from ablate.model.spec import ModelSpec
from ablate.model.transformer import build_model
from tests.fixtures.warm_cli import WarmCli

ALL_CORES = sorted(os.sched_getaffinity(0))
WORKER, WORKERS = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKER:
    torch.set_num_threads(1)
    if 1 < WORKERS <= len(ALL_CORES):
        os.sched_setaffinity(0, ALL_CORES[int(WORKER.removeprefix("gw")) :: WORKERS])

ROOT = Path(__file__).resolve().parents[1]
WARM = WarmCli()  # this process's server of `ablate` commands, started by the first

# Tests read Multi30k from $ABLATE_DATA_DIR; CI sets it to ../shared/corpora, and so does this, when it is there.
if not os.environ.get("ABLATE_DATA_DIR") and (ROOT.parent / "shared" / "corpora").is_dir():
    os.environ["ABLATE_DATA_DIR"] = str(ROOT.parent / "shared" / "corpora")


@pytest.fixture(autouse=True, scope="session")
def _cache(tmp_path_factory):
    """ablate's cache (vocabularies, BLEU statistics, the machine's peak) in a temporary directory shared by the
    whole session, xdist's workers included: what one worker computed the other reads (the cache's writes are
    atomic, so two workers making the same entry at once each write a whole file)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cache"
    folder.mkdir(exist_ok=True)
    os.environ["ABLATE_CACHE_DIR"] = str(folder)


def tiny_spec(**changes) -> ModelSpec:
    """A model small enough for exact checks in milliseconds; `changes` as in YAML."""
    base = dict(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0, tying="none")
    return ModelSpec.model_validate(base | changes)


def tiny_model(vocab: int = 50, **changes):
    torch.manual_seed(0)
    return build_model(tiny_spec(**changes), vocab, vocab).eval()


def randomised(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn at random, biases, norm gains and biases, QK-norm's g too, so that a part that ignores
    one fails a comparison with a reference: matrices N(0, 0.3²), vectors N(1, 0.3²) (gains near 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return module


def on_cores(cores: list[int] | None):
    """A `preexec_fn` that lets a child process run on `cores` (None: this process's cores, its default)."""
    return None if cores is None else lambda: os.sched_setaffinity(0, cores)


def cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
        cores: list[int] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """Runs `ablate ARGS` as a user types it; `env`: variables set on top of this process's; `cores`: the
    cores it may use (default: this worker's, see ALL_CORES). The process is forked from one that has imported
    ablate already (tests/fixtures/warm_cli.py), set up as a fresh one; ABLATE_WARM_CLI=0 starts it fresh."""
    return WARM.run(list(args), cwd, env or {}, sorted(os.sched_getaffinity(0)) if cores is None else cores,
                    timeout=300)  # fmt: skip


COMMANDS: Counter[str] = Counter()  # the xdist workers' WARM.counts, as each ends


def pytest_configure(config):
    """ablate's modules compiled once, before the workers start: the processes the tests start (a sweep's fork
    server, a fresh `ablate`) then read the bytecode rather than compile every module again, which they would do
    each time where PYTHONDONTWRITEBYTECODE is set, as on this project's machines (about 13% of a file of CLI tests)."""
    if not hasattr(config, "workerinput"):
        import compileall

        compileall.compile_dir(ROOT / "ablate", quiet=1)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hands its counts to the controller
        session.config.workeroutput["ablate_commands"] = json.dumps(WARM.counts)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    COMMANDS.update(json.loads(getattr(node, "workeroutput", {}).get("ablate_commands", "{}")))  # none if it crashed


def pytest_terminal_summary(terminalreporter):
    """How the tests' `ablate` commands started: forked from the warm process, or fresh, and why."""
    counts = COMMANDS + WARM.counts
    if counts:
        why = "".join(f"; {key.split(': ', 1)[1]}: {n}" for key, n in sorted(counts.items()) if ": " in key)
        terminalreporter.write_line(f"ablate commands: {counts['forked']} forked from a warm process, "
                                    f"{counts['started fresh']} started fresh{why}")  # fmt: skip


def trained_experiment(tmp_path_factory, name: str, text: str, *args: str) -> tuple[Path, Path]:
    """An experiment file `name`.yaml holding `text`, trained by `ablate run` with `args` into a fresh results
    directory: (the file, the results directory)."""
    root = tmp_path_factory.mktemp(name)
    path = root / f"{name}.yaml"
    path.write_text(text)
    done = cli("run", str(path), "--results", str(root / "results"), *args)
    assert done.returncode == 0, done.stderr
    return path, root / "results"


@dataclass(frozen=True)
class SmokeRun:
    """`ablate run experiments/smoke.yaml`, as a user types it: its output and its results directory."""

    stdout: str
    stderr: str
    returncode: int
    results: Path  # holds smoke/


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> SmokeRun:
    """experiments/smoke.yaml, trained once for the whole test session and shared by the xdist workers (the
    first to ask trains it, under a lock; the others wait and read it). Read it, never change it: a test that
    changes results copies `results` into its own directory first."""
    shared = tmp_path_factory.getbasetemp()
    if WORKER:
        shared = shared.parent  # this session's directory, above every worker's own
    done = shared / "smoke-run.json"
    with open(shared / "smoke-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            run = cli("run", "experiments/smoke.yaml", "--results", str(shared / "smoke-results"))
            done.write_text(json.dumps({"stdout": run.stdout, "stderr": run.stderr, "returncode": run.returncode}))
    return SmokeRun(**json.loads(done.read_text()), results=shared / "smoke-results")


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
# `--dist loadfile` a worker takes a whole file, in collection order (pyproject's `--no-loadscope-reorder`; by
# default xdist would order files by their number of tests, which put the 4 Slurm tests, 260 s on one worker,
# last), so these go first, slowest first: the longest processing time first keeps one worker from running a
# slow file last while the other is idle. Each file's seconds in one `pytest -n 2 --durations=0` on a Zen 4
# (test_stopping.py's: alone, on an AMX Xeon). scripts/balance_tests.py replays xdist's scheduler on such a log:
# in a fresh clone on a Zen 4 (2026-11-26, 1,339 s of tests) this order and longest-first both ended each worker
# at about 670 s, and pytest took 681 s:
SLOWEST_FILES = ["test_runner.py", "test_check.py", "test_slurm_cluster.py", "test_stopping.py",  # 363, 286, 260, 134
                 "test_sequential.py",  # about 100, not yet measured in a fresh clone
                 "test_report.py", "test_budgets.py", "test_launchers.py", "test_comparisons.py",  # 125, 108, 99, 97
                 "test_cores.py", "test_flops.py", "test_readme.py", "test_decoding.py",  # 75, 46, 40, 19
                 "test_cli.py"]  # 19  # fmt: skip


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order
