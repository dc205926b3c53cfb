"""The run record (ablate.record): one definition of result.json and point.json that every committed file fits."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ablate.config import hash_marks
from ablate.errors import SpecError
from ablate.record import (
    BudgetPoint,
    Ending,
    Evaluation,
    Footprint,
    Identity,
    RunResult,
    Setup,
    Status,
    Validation,
    resolved_precision,
)
from ablate.rundir import (
    ADDED,
    BOOKKEEPING,
    as_stored,
    config_hash,
    read_config,
    read_point,
    read_result,
    stored_hash,
    summary_order,
    write_result,
)
from ablate.train.spec import RunSpec
from tests.conftest import ROOT

RESULTS = sorted((ROOT / "results").glob("**/result.json"))
POINTS = sorted((ROOT / "results").glob("**/point.json"))


def test_the_committed_results_are_there_to_check():
    assert len(RESULTS) >= 100 and len(POINTS) >= 30


@pytest.mark.parametrize("path", RESULTS + POINTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_record_loads_and_writes_back_unchanged(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    if path.name == "result.json":
        record = read_result(path.parent)
        assert isinstance(record, RunResult) and record.status in set(Status)
    else:
        record = read_point(path.parents[2], float(path.parent.name))
        assert isinstance(record, BudgetPoint)
    assert record.dump() == data  # no field lost, renamed or retyped (2000 stays 2000, an explicit null stays)


def test_a_misspelt_field_is_a_one_line_error_naming_the_file_and_the_field(tmp_path):
    good = json.loads(RESULTS[0].read_text(encoding="utf-8"))
    (tmp_path / "result.json").write_text(json.dumps(good | {"valid_los": 1.0}))
    with pytest.raises(SpecError) as error:
        read_result(tmp_path)
    assert error.value.lines == [f"{tmp_path / 'result.json'}: valid_los: unknown key 'valid_los'; did you mean "
                                 "'valid_loss'? (not a run record of this version of ablate)"]  # fmt: skip
    (tmp_path / "result.json").write_text(json.dumps(good | {"steps": "many"}))
    with pytest.raises(SpecError, match=r"result.json: steps: "):
        read_result(tmp_path)


def test_a_missing_or_cut_off_result_reads_as_none(tmp_path):
    assert read_result(tmp_path) is None
    (tmp_path / "result.json").write_text('{"run": "baseline", "se')
    assert read_result(tmp_path) is None


def test_the_report_takes_the_run_order_of_every_committed_summary_csv():
    """summary_order reads the run column as pandas does (quoted fields with commas: lr=... run names, the
    device)."""
    summaries = sorted((ROOT / "results").glob("*/summary.csv"))
    assert summaries
    for path in summaries:
        runs = list(pd.read_csv(path)["run"].astype(str))
        assert summary_order(path.parent) == runs and any(run.startswith("baseline") for run in runs), path


def test_a_missing_or_unreadable_summary_gives_no_order(tmp_path):
    assert summary_order(tmp_path) == []
    (tmp_path / "summary.csv").write_bytes(b"run,BLEU\n\xff\xfe,1\n")
    assert summary_order(tmp_path) == []


def test_a_stored_config_reads_back_and_an_empty_one_has_no_hash(tmp_path):
    (tmp_path / "config.yaml").write_text("model: {d_model: 32}\n")
    assert read_config(tmp_path) == {"model": {"d_model": 32}}
    assert stored_hash(tmp_path) == config_hash({"model": {"d_model": 32}})
    (tmp_path / "config.yaml").write_text("")
    assert read_config(tmp_path) == {} and stored_hash(tmp_path) is None
    assert stored_hash(tmp_path / "nowhere") is None


def test_a_result_written_is_the_result_read(tmp_path):
    result = RunResult(run="baseline", seed=2, status=Status.COMPLETED, lr=None, scores={
        "test": {"bleu": 30.1, "chrf": 55.0, "bleu_signature": "b", "chrf_signature": "c"}})  # fmt: skip
    write_result(tmp_path, result)
    data = json.loads((tmp_path / "result.json").read_text())
    assert data == {
        "run": "baseline",
        "seed": 2,
        "status": "completed",
        "lr": None,
        "scores": {"test": {"bleu": 30.1, "chrf": 55.0, "bleu_signature": "b", "chrf_signature": "c"}},
    }
    assert read_result(tmp_path) == result and read_result(tmp_path).bleu("test") == 30.1


def test_a_run_seen_at_a_budget_point_takes_the_points_scores_and_length():
    score = {"bleu_signature": "b", "chrf_signature": "c"}
    run = RunResult(run="r", seed=1, status=Status.COMPLETED, steps=8000, budget={"max_steps": 8000},
                    valid_loss=1.7, params=5, scores={"t": score | {"bleu": 37.0, "chrf": 60.0}})  # fmt: skip
    point = BudgetPoint(budget=1000, step=1000, valid_loss=2.5, scores={"t": score | {"bleu": 27.0, "chrf": 50.0}})
    early = run.at(point, "max_steps")
    assert (early.steps, early.budget, early.valid_loss, early.bleu("t"), early.params) == (
        1000, {"max_steps": 1000}, 2.5, 27.0, 5)  # fmt: skip
    end = run.end_point("max_steps")
    assert (end.budget, end.step, end.valid_loss, end.bleu("t")) == (8000, 8000, 1.7, 37.0)
    assert run.end_point("max_flops") is None  # its length is not counted in FLOPs
    stopped = run.model_copy(update={"steps": 2150, "stopped_by": "early_stopping"})
    assert stopped.end_point("max_steps") is None  # it never reached its cap of 8,000: no point there


def test_the_hash_rules_are_the_marks_on_the_fields():
    """The torch-free hash (rundir) keeps a copy of what the fields mark (config.BOOKKEEPING, ADDED): equal."""
    marks = hash_marks(RunSpec)
    assert {key for key, (mark, _) in marks.items() if mark == "never"} == BOOKKEEPING
    assert {key: default for key, (mark, default) in marks.items() if mark == "unless default"} == ADDED


def test_every_committed_run_s_config_hashes_today_as_it_recorded():
    """A key added since (data.lowercase, data.tokenize, tokenizer.merges, ...) at its default leaves every committed
    run's hash as result.json has it: its config.yaml, read as a RunSpec today, is the run it was, not one to train
    again."""
    checked = 0
    for result in sorted((ROOT / "results").glob("*/runs/*/seed-*/result.json")):
        spec = RunSpec.model_validate(as_stored(read_config(result.parent))).model_dump(mode="json")
        assert config_hash(spec) == read_result(result.parent).config_hash, result.parent.relative_to(ROOT)
        checked += 1
    assert checked >= 200


# Fields whose default changed when they were added (issue 37's faster kernels): what runs did before them.
CHANGED = {("model", "dropout_sampler"): "bernoulli", ("training", "cross_entropy"): "torch",
           ("training", "adam_kernel"): "default", ("training", "shape_buckets"): None}  # fmt: skip


def test_a_spec_stored_before_a_faster_default_reads_and_hashes_as_the_run_it_was():
    """A stored spec without the new keys trains what it trained (torch's kernels), hashes as it did, and so does
    a spec that names the old values; today's defaults train another run, under another hash."""
    today = RunSpec.model_validate({"training": {"max_steps": 10}}).model_dump(mode="json")
    assert {key: today[key[0]][key[1]] for key in CHANGED} == {
        ("model", "dropout_sampler"): "bits16", ("training", "cross_entropy"): "chunked",
        ("training", "adam_kernel"): "fused", ("training", "shape_buckets"): "auto"}  # fmt: skip
    before = json.loads(json.dumps(today))
    for section, key in CHANGED:
        del before[section][key]
    read = RunSpec.model_validate(as_stored(before)).model_dump(mode="json")
    assert {key: read[key[0]][key[1]] for key in CHANGED} == CHANGED
    assert config_hash(read) == config_hash(before) != config_hash(today)
    assert as_stored(today) == today  # a spec that has the keys keeps them


def test_auto_precision_reads_as_what_the_run_measured():
    assert resolved_precision("auto", "bf16") == "bf16"
    assert resolved_precision("auto", None) == "auto"  # not measured: nothing to resolve it to
    assert resolved_precision("fp32", "bf16") == "fp32"  # pinned is pinned


def test_a_record_made_of_pieces_takes_what_each_was_given_and_refuses_a_stray_field():
    who = Identity(run="baseline", seed=3, config_hash="abc")
    setup = Setup(params=1_000, device="cpu")
    result = RunResult.of(who, Ending(status=Status.COMPLETED), setup, Footprint(wall_seconds=1.5),
                          Footprint(peak_memory_mib=9.0))  # fmt: skip
    assert result.dump() == {"run": "baseline", "seed": 3, "config_hash": "abc", "status": "completed",
                             "params": 1_000, "device": "cpu", "wall_seconds": 1.5, "peak_memory_mib": 9.0}  # fmt: skip
    later = RunResult.of(result, Footprint(wall_seconds=2.0), note="again")
    assert (later.wall_seconds, later.peak_memory_mib, later.note) == (2.0, 9.0, "again")  # a later piece wins
    with pytest.raises(ValueError, match="averaged"):
        RunResult.of(who, Ending(status=Status.COMPLETED), Validation(step=1, valid_loss=2.0, averaged=5))
    point = BudgetPoint.of(Evaluation(valid_loss=2.0), Validation(step=10, valid_loss=2.0, valid_bleu=30.0), budget=10)
    assert point.dump() == {"valid_loss": 2.0, "step": 10, "valid_bleu": 30.0, "budget": 10}


# The modules that build result.json and point.json: from typed pieces (ablate.record), never a dict of field names.
WRITERS = ["train/pipeline.py", "train/worker.py", "train/budgets.py", "train/evaluation.py", "train/flops.py",
           "train/job.py", "sweep/launchers/__init__.py"]  # fmt: skip
SECTIONS = {"model", "tokenizer", "data", "training", "evaluation"}  # a spec's, whose keys may share a field's name


def field_names_by_string(source: str) -> list[str]:
    """Where `source` names a run record's field by a string: a dict key, a subscript or a .get/.pop/.setdefault.
    A key of a spec's section (`spec["training"]["precision"]`) is the spec's, not the record's."""
    import ast

    fields = set(RunResult.model_fields) | set(BudgetPoint.model_fields)
    found = []
    for node in ast.walk(ast.parse(source)):
        keys = []
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Subscript):
            inner = node.value
            section = isinstance(inner, ast.Subscript) and getattr(inner.slice, "value", None) in SECTIONS
            keys = [] if section else [node.slice]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "pop", "setdefault"):
            keys = node.args[:1]
        found += [f"{k.lineno}: {k.value}" for k in keys if isinstance(k, ast.Constant) and k.value in fields]
    return found


def test_result_json_is_written_from_typed_pieces_not_dicts_of_field_names():
    named = {path: field_names_by_string((ROOT / "ablate" / path).read_text()) for path in WRITERS}
    assert named == {path: [] for path in WRITERS}
    planted = 'fields = {"params": 5}\nresult["steps"] = 1\nend.get("stopped_by")\nspec["training"]["precision"]\n'
    assert field_names_by_string(planted) == ["1: params", "2: steps", "3: stopped_by"]
