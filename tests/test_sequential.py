"""`ablate run --until-decided --max-seeds N` through the CLI, on the smoke experiment: it stops by itself, resumes
after kill -9, adds no seed to a decided row, and keeps its design; design.json as plain runs declare it."""

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ablate.errors import UserError
from ablate.report.results import load_results
from ablate.report.verdicts import Declared, design, sequential
from ablate.rundir import read_design
from ablate.sweep.design import declare
from ablate.sweep.experiment import load_experiment
from tests.conftest import ROOT, cli

SMOKE = ROOT / "experiments" / "smoke.yaml"
# `same` differs from the baseline in bookkeeping alone, so it has the baseline's config hash: its seeds are
# the baseline's, copied, and its ΔBLEU is exactly 0 (never better or worse), its interval the seeds' spread.
# fp32 on every CPU: in bf16 (`auto` on a Zen 4) 60 steps left every seed at 0.00-0.02 BLEU, a spread inside the
# ±0.05 margin, so `same` was equivalent at the first look instead of taking every seed. Batches of 2,000 tokens:
# with smoke.yaml's 1,000, `same` was equivalent at the first look too.
EXPERIMENT = f"""
name: seq
extends: {SMOKE}
training: {{max_steps: 60, validate_every: 30, precision: fp32, max_tokens: 2000}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
variants:
  pre_ln: {{model.norm_placement: pre_ln}}
  same: {{training.diagnostics_every: 7}}
"""
FLAGS = ["--until-decided", "--max-seeds", "4", "--margin", "0.05", "--seeds", "3"]


@dataclass(frozen=True)
class Sequential:
    file: Path
    results: Path  # holds seq/
    before_kill: dict[Path, bytes]  # result.json files finished before kill -9, as they were
    design_before_kill: bytes
    resumed: subprocess.CompletedProcess

    @property
    def root(self) -> Path:
        return self.results / "seq"


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory) -> Sequential:
    """The sequential sweep killed with SIGKILL once its first seed has finished, then the same command again."""
    root = tmp_path_factory.mktemp("sequential")
    path = root / "seq.yaml"
    path.write_text(EXPERIMENT)
    results = root / "results"
    args = [sys.executable, "-m", "ablate.cli", "run", str(path), "--results", str(results), *FLAGS]
    proc = subprocess.Popen(args, cwd=ROOT, env=os.environ | {"PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while not list((results / "seq" / "runs").glob("*/seed-*/result.json")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no seed finished in time"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    finished = {p: p.read_bytes() for p in (results / "seq" / "runs").glob("*/seed-*/result.json")}
    design_file = (results / "seq" / "design.json").read_bytes()
    resumed = cli("run", str(path), "--results", str(results), *FLAGS)
    assert resumed.returncode == 0, resumed.stderr
    return Sequential(path, results, finished, design_file, resumed)


def replayed(root: Path):
    record = read_design(root)
    return sequential(load_results(root), Declared(design(record), record.seeds, "test"), "test_2017_mscoco"), record


def test_it_stops_by_itself_and_a_kill_9_loses_nothing_finished(killed_and_resumed):
    run = killed_and_resumed
    assert "until decided: look 1 of 2" in run.resumed.stdout
    assert re.search(r"look 2 of 2 .*; at most 0 more seeds after this look", run.resumed.stdout)  # `same` gets there
    assert "seq: verdicts" in run.resumed.stdout and "seeds: " in run.resumed.stdout
    for path, text in run.before_kill.items():  # a finished seed is read, never trained again
        assert path.read_bytes() == text
    assert (run.root / "design.json").read_bytes() == run.design_before_kill
    state, record = replayed(run.root)
    assert state.done and set(state.decisions) == {"pre_ln", "same"}
    assert record.declared_at is not None  # when the margin was declared: the first run
    expected = {"margin": 0.05, "alpha": 0.05, "seeds": [1, 2, 3, 4], "first": 3, "max_seeds": 4, "spending": "pocock"}
    assert record.model_dump(exclude={"declared_at"}, exclude_none=True) == expected


def test_each_row_has_the_seeds_of_its_deciding_look(killed_and_resumed):
    root = killed_and_resumed.root
    state, record = replayed(root)
    runs = load_results(root).runs
    same = state.decisions["same"]  # ΔBLEU exactly 0, its interval the seeds' spread, wider than ±0.05
    assert (same.verdict, same.look, same.seeds) == ("undecided", 1, 4)  # so it took every seed
    for row, decision in state.decisions.items():  # each row has the seeds of its deciding look, none after
        assert sorted(j.result.seed for j in runs[row]) == record.seeds[: decision.seeds]
    reference = max(d.reference_seeds for d in state.decisions.values())
    assert sorted(j.result.seed for j in runs["baseline"]) == record.seeds[:reference]


def test_a_row_decided_at_the_first_look_gets_no_more_seeds(killed_and_resumed):
    """The same runs under a margin of 5 BLEU (smoke scores below 1): every row is equivalent on its first 3 seeds,
    reused from `seq` by their config hashes, and no fourth seed is copied or trained."""
    run = killed_and_resumed
    wide = run.file.with_name("wide.yaml")
    wide.write_text(EXPERIMENT.replace("name: seq", "name: wide"))
    flags = [*FLAGS]
    flags[flags.index("--margin") + 1] = "5"
    done = cli("run", str(wide), "--results", str(run.results), *flags)
    assert done.returncode == 0, done.stderr
    assert "0 to train" in done.stdout and "started on" not in done.stdout
    state, _ = replayed(run.results / "wide")
    assert {row: (d.verdict, d.look, d.seeds) for row, d in state.decisions.items()} == {
        "pre_ln": ("equivalent", 0, 3), "same": ("equivalent", 0, 3)}  # fmt: skip
    runs = run.results / "wide" / "runs"
    found = sorted(p.relative_to(runs).as_posix() for p in runs.glob("*/seed-*"))
    assert found == [f"{r}/seed-{n}" for r in ("baseline", "pre_ln", "same") for n in (1, 2, 3)]
    assert "seeds: 9 used, against 12 for a fixed design of 4 seeds a run." in done.stdout


def test_the_same_command_again_trains_nothing_and_the_report_shows_its_verdicts(killed_and_resumed):
    run = killed_and_resumed
    again = cli("run", str(run.file), "--results", str(run.results), *FLAGS)
    assert again.returncode == 0, again.stderr
    assert "0 to train" in again.stdout and "started on" not in again.stdout
    report = cli("report", str(run.root), "--format", "csv", "--no-files")
    assert report.returncode == 0, report.stderr
    rows = {row["run"]: row for row in csv.DictReader(io.StringIO(report.stdout))}
    state, _ = replayed(run.root)
    for row, decision in state.decisions.items():
        assert rows[row]["verdict"] == decision.verdict
        assert rows[row]["decided at"].startswith(f"look {decision.look + 1} of 2: {decision.seeds} v ")


def test_a_changed_design_is_refused_and_design_json_is_kept(killed_and_resumed):
    run = killed_and_resumed
    before = (run.root / "design.json").read_bytes()
    for changed in (["--max-seeds", "5"], ["--margin", "0.5"], ["--seeds", "4"]):
        flags = list(FLAGS)
        flags[flags.index(changed[0]) + 1] = changed[1]
        done = cli("run", str(run.file), "--results", str(run.results), *flags)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        if changed[0] == "--margin":  # refused first as a margin moved after the results (ablate.sweep.design)
            assert f"{run.root / 'design.json'}: --margin 0.5, but margin 0.05 was declared" in done.stderr
        else:
            assert f"{run.root / 'design.json'}: declares margin 0.05" in done.stderr
            assert "fixed before its first look" in done.stderr
        assert (run.root / "design.json").read_bytes() == before
    plain = cli("run", str(run.file), "--results", str(run.results), "--seeds", "3", "--margin", "0.05")
    assert plain.returncode == 0, plain.stderr  # a plain run never replaces a sequential design
    assert (run.root / "design.json").read_bytes() == before
    moved = cli("run", str(run.file), "--results", str(run.results), "--seeds", "3", "--margin", "1")
    assert moved.returncode == 2 and "margin is fixed before the results" in moved.stderr
    assert (run.root / "design.json").read_bytes() == before


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--until-decided"], "--until-decided and --max-seeds N go together"),
        (["--until-decided", "--max-seeds", "4", "--seeds", "2"], "starts every run with 3 seeds or more, got 2"),
        (["--until-decided", "--max-seeds", "4", "--seeds", "3", "--only", "pre_ln"], "cannot take --only"),
        (["--margin", "-1"], "expected a positive margin in BLEU, got -1"),
    ],
)
def test_bad_flags_get_one_line_and_nothing_is_written(tmp_path, flags, message):
    done = cli("run", str(SMOKE), "--results", str(tmp_path), *flags)
    assert done.returncode == 2, done.stdout
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "smoke").exists()


@pytest.mark.parametrize(
    ("seeds", "max_seeds", "lr_sweep", "message"),
    [
        (2, 4, None, "starts every run with 3 seeds or more, got 2"),
        (3, 2, None, "--max-seeds 2 is below the 3 seeds every run starts with"),
        (3, 4, [1e-3, 2e-3], "a learning-rate sweep's rows have a baseline each"),
    ],
)
def test_a_design_that_cannot_hold_is_refused_before_anything_is_written(tmp_path, seeds, max_seeds, lr_sweep,
                                                                         message):  # fmt: skip
    experiment = load_experiment(SMOKE, lr_sweep=lr_sweep)
    with pytest.raises(UserError) as error:
        declare(experiment, tmp_path, seeds=seeds, margin=1.0, max_seeds=max_seeds)
    assert len(error.value.lines) == 1 and message in error.value.lines[0]
    assert not (tmp_path / "smoke").exists()


def test_a_plain_run_declares_its_margin_and_the_report_reads_it(tmp_path):
    """design.json as a plain run writes it: from the header's `margin:` (inherited), --margin over it."""
    child = tmp_path / "child.yaml"
    child.write_text(f"name: smoke\nextends: {SMOKE}\nmargin: 0.7\n")
    experiment = load_experiment(child)
    assert experiment.margin == 0.7
    record = declare(experiment, tmp_path)
    assert (record.margin, record.seeds, record.first, record.max_seeds) == (0.7, [1], 1, None)
    assert json.loads((tmp_path / "smoke" / "design.json").read_text())["margin"] == 0.7
    assert declare(experiment, tmp_path, seeds=3, margin=1.5).model_dump()["margin"] == 1.5
    assert read_design(tmp_path / "smoke").seeds == [1, 2, 3]
    assert declare(load_experiment(SMOKE), tmp_path / "none") is None  # nothing declared: no file
    assert not (tmp_path / "none").exists()
