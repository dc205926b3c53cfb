"""Each row beside the paper's Table 3: which runs match a row, which of the paper's rows is chosen, and
how the directions and the agreement are read. The paper's numbers are checked against REFERENCES.md's."""

import copy
from pathlib import Path

import pandas as pd
import pytest

from ablate.record import RunResult, Status
from ablate.report.literature import literature_frame, paper_row, table3_change
from ablate.report.paper import TABLE3, TABLE3_BASE
from ablate.report.results import ExperimentResults, JobRecord
from ablate.sweep.experiment import load_experiment
from tests.conftest import ROOT

TABLE3_YAML = ROOT / "experiments" / "table3.yaml"


def configs() -> dict[str, dict]:
    """The resolved spec of every run of experiments/table3.yaml, as its config.yaml holds it."""
    return {run.name: run.spec.model_dump(mode="json") for run in load_experiment(TABLE3_YAML).runs}


def test_every_row_of_table3_yaml_matches_its_own_setting():
    runs = configs()
    base = runs.pop("baseline")
    expected = {"heads=1": ("model.heads", "4", "1"), "heads=8": ("model.heads", "4", "8"),
                "d_k=16": ("model.d_k", "64", "16"), "layers=2": ("layers", "3", "2"),
                "d_model=512": ("model.d_model", "256", "512"), "d_ff=256": ("model.d_ff", "512", "256"),
                "dropout=0": ("model.dropout", "0.1", "0.0"),
                "label_smoothing=0.2": ("training.label_smoothing", "0.1", "0.2"),
                "positions=learned": ("model.positions", "sinusoidal", "learned")}  # fmt: skip
    for name, config in runs.items():
        change = table3_change(base, config)
        assert change is not None, name
        if name in expected:
            assert change == expected[name], name
    tied = copy.deepcopy(base)
    tied["model"]["d_k"] = 16  # d_v follows d_k, as runs made before model.d_v did
    assert table3_change(base, tied) == ("model.d_k", "64", "16")
    old = copy.deepcopy(base)
    del old["model"]["d_v"]  # a baseline stored before model.d_v: its d_v was its d_k
    assert table3_change(old, runs["d_k=16"]) == ("model.d_k", "64", "16")
    values = copy.deepcopy(base)
    values["model"]["d_v"] = 32
    assert table3_change(base, values) is None  # d_v alone: no row of Table 3 changes it
    pinned = copy.deepcopy(runs["heads=8"])
    pinned["model"]["d_v"] = 64  # d_k followed the heads, d_v did not: not the paper's row A
    assert table3_change(base, pinned) is None
    wide = copy.deepcopy(runs["d_model=512"])
    wide["model"]["d_v"] = 64
    assert table3_change(base, wide) is None
    two = copy.deepcopy(base)
    two["model"]["heads"], two["model"]["d_ff"] = 2, 1024
    assert table3_change(base, two) is None  # two settings at once match no row
    uneven = copy.deepcopy(base)
    uneven["model"]["encoder_layers"] = 4
    assert table3_change(base, uneven) is None  # the encoder alone is not the paper's N
    other = copy.deepcopy(base)
    other["model"]["scaling"] = "none"
    assert table3_change(base, other) is None  # not a setting of Table 3
    seed = copy.deepcopy(base)
    seed["training"]["seed"] = 2
    assert table3_change(base, seed) is None


@pytest.mark.parametrize(("key", "ours", "paper"), [
    ("model.heads", ("4", "1"), 1),        # 1/4: as near 1/8 as 1/2, and our own value
    ("model.heads", ("4", "2"), 4),        # 1/2 of ours, 1/2 of the paper's 8
    ("model.heads", ("4", "8"), 16),       # twice ours, twice the paper's
    ("model.d_k", ("64", "32"), 32),
    ("layers", ("3", "2"), 4),             # 2/3 of ours: nearest is 4/6
    ("layers", ("3", "4"), 8),             # deeper: the paper's only deeper row
    ("model.d_model", ("256", "128"), 256),
    ("model.d_model", ("256", "512"), 1024),
    ("model.d_ff", ("512", "1024"), 4096),
    ("model.dropout", ("0.1", "0.0"), 0.0),
    ("model.dropout", ("0.1", "0.2"), 0.2),
    ("training.label_smoothing", ("0.1", "0.0"), 0.0),
    ("model.positions", ("sinusoidal", "learned"), "learned"),
])  # fmt: skip
def test_the_paper_row_changes_the_setting_the_way_we_did(key, ours, paper):
    assert paper_row(key, *ours)[0] == paper


def test_the_paper_numbers_are_those_of_references_md():
    text = (ROOT.parent / "shared" / "REFERENCES.md").read_text() if (ROOT.parent / "shared").is_dir() else None
    if text is None:
        pytest.skip("../shared/REFERENCES.md is not beside the project")
    for key, (row, values) in TABLE3.items():
        for value, bleu, ppl in values:
            if value == TABLE3_BASE[key]:
                assert (bleu, ppl) == (25.8, 4.92), key  # the base model's row
            else:
                assert f"{bleu}" in text and f"{ppl:.2f}" in text, (key, value)
        assert f"| {row} |" in text


def job(config: dict, ppl: float) -> JobRecord:
    return JobRecord(Path("."), RunResult(run="r", seed=1, status=Status.COMPLETED, valid_ppl=ppl), config)


def test_directions_and_agreement_from_the_verdicts():
    """We find what the comparison table's verdict says: an interval that covers 0 (undecided) agrees with
    nothing, not even a paper that found no difference; only equivalence is ≈; one seed is not decided."""
    runs = configs()
    exp = ExperimentResults("table3", Path("."), {
        "baseline": [job(runs["baseline"], 10.0)],
        "heads=1": [job(runs["heads=1"], 11.0)],          # worse: agrees (the paper: -0.9)
        "positions=learned": [job(runs["positions=learned"], 10.0)],  # ≈ and equivalent: agrees
        "d_model=512": [job(runs["d_model=512"], 9.0)],    # the paper: better; ours undecided: not decided
        "dropout=0.2": [job(runs["dropout=0.2"], 10.5)],   # the paper: worse (-0.3); ours better: does not
        "d_ff=1024": [job(runs["d_ff=1024"], 10.5)],       # one seed: not decided, whatever its interval
    })  # fmt: skip
    frame = pd.DataFrame([
        {"run": "baseline", "ΔBLEU": None, "ΔBLEU lo": None, "ΔBLEU hi": None, "valid ppl": 10.0, "verdict": None},
        {"run": "heads=1", "ΔBLEU": -1.5, "ΔBLEU lo": -2.1, "ΔBLEU hi": -0.9, "valid ppl": 11.0, "verdict": "worse"},
        {"run": "positions=learned", "ΔBLEU": 0.2, "ΔBLEU lo": -0.4, "ΔBLEU hi": 0.8, "valid ppl": 10.0,
         "verdict": "equivalent"},
        {"run": "d_model=512", "ΔBLEU": 0.3, "ΔBLEU lo": -0.3, "ΔBLEU hi": 0.9, "valid ppl": 9.0,
         "verdict": "undecided"},
        {"run": "dropout=0.2", "ΔBLEU": 0.9, "ΔBLEU lo": 0.2, "ΔBLEU hi": 1.6, "valid ppl": 10.5, "verdict": "better"},
        {"run": "d_ff=1024", "ΔBLEU": -1.9, "ΔBLEU lo": -2.5, "ΔBLEU hi": -1.3, "valid ppl": 10.5,
         "verdict": "undecided (1 seed)"},
    ])  # fmt: skip
    table, notes = literature_frame(exp, frame)
    rows = table.set_index("run")
    assert list(rows.index) == ["heads=1", "positions=learned", "d_model=512", "dropout=0.2", "d_ff=1024"]
    assert rows.loc["heads=1", ["paper ΔBLEU", "paper says", "we find", "agrees"]].tolist() == [
        -0.9,
        "worse",
        "worse",
        "yes",
    ]
    assert rows.loc["heads=1", "paper"] == "heads 8 → 1: 25.8 → 24.9 BLEU"
    assert rows.loc["heads=1", "paper ΔPPL"] == pytest.approx(0.37)
    assert rows.loc["heads=1", "ΔPPL"] == pytest.approx(1.0)
    assert rows.loc["positions=learned", ["paper says", "we find", "agrees"]].tolist() == ["≈", "≈", "yes"]
    assert rows.loc["d_model=512", ["paper says", "we find", "agrees"]].tolist() == ["better", "not decided",
                                                                                      "not decided"]  # fmt: skip
    assert rows.loc["dropout=0.2", ["paper says", "we find", "agrees"]].tolist() == ["worse", "better", "no"]
    assert rows.loc["d_ff=1024", ["we find", "agrees"]].tolist() == ["not decided (1 seed)", "not decided"]
    assert notes[0].startswith("2 of 5 rows go the paper's way, 1 against it, 2 not decided")
    no_verdicts = frame.drop(columns=["ΔBLEU lo", "ΔBLEU hi", "verdict"])
    table, notes = literature_frame(exp, no_verdicts)
    assert set(table["agrees"]) == {"?"} and any(n.startswith("?:") for n in notes)


def test_a_d_k_row_says_whether_d_v_followed_it():
    """The paper's row B kept d_v = 64; a run whose d_v shrank with its d_k is marked, not passed off as it."""
    runs = configs()
    assert runs["d_k=16"]["model"]["d_v"] == 64
    tied = copy.deepcopy(runs["d_k=16"])
    tied["model"]["d_v"] = None
    exp = ExperimentResults("table3", Path("."), {
        "baseline": [job(runs["baseline"], 10.0)], "d_k=16": [job(runs["d_k=16"], 11.0)], "tied": [job(tied, 12.0)],
    })  # fmt: skip
    frame = pd.DataFrame([
        {"run": "baseline", "ΔBLEU": None, "ΔBLEU lo": None, "ΔBLEU hi": None, "valid ppl": 10.0},
        {"run": "d_k=16", "ΔBLEU": -1.0, "ΔBLEU lo": -1.5, "ΔBLEU hi": -0.5, "valid ppl": 11.0},
        {"run": "tied", "ΔBLEU": -2.0, "ΔBLEU lo": -2.5, "ΔBLEU hi": -1.5, "valid ppl": 12.0},
    ])  # fmt: skip
    table, notes = literature_frame(exp, frame)
    rows = table.set_index("run")
    assert rows.loc["d_k=16", "change"] == "d_k 64 → 16"
    assert rows.loc["tied", "change"] == "d_k 64 → 16 (d_v with it)"
    assert set(rows["row"]) == {"B"}
    assert any(n.startswith("(d_v with it): ") for n in notes)
    narrow = copy.deepcopy(runs["baseline"])
    narrow["model"]["d_v"] = 16  # d_v already 16 in the baseline: a d_k of 16 leaves it as it was
    exp = ExperimentResults("table3", Path("."), {"baseline": [job(narrow, 10.0)], "tied": [job(tied, 12.0)]})
    table, notes = literature_frame(exp, frame[frame["run"] != "d_k=16"])
    assert table["change"].tolist() == ["d_k 64 → 16"]
    assert not any(n.startswith("(d_v with it)") for n in notes)


def test_an_experiment_with_no_table3_change_has_no_such_table():
    runs = configs()
    other = copy.deepcopy(runs["baseline"])
    other["model"]["norm_placement"] = "pre_ln"
    exp = ExperimentResults("norm", Path("."), {"baseline": [job(runs["baseline"], 10.0)], "pre_ln": [job(other, 9.0)]})
    frame = pd.DataFrame([{"run": "baseline", "ΔBLEU": None, "valid ppl": 10.0},
                          {"run": "pre_ln", "ΔBLEU": 1.0, "valid ppl": 9.0}])  # fmt: skip
    assert literature_frame(exp, frame) is None
