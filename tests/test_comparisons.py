"""Comparisons a paper can rest on, through the CLI: learning-rate sweeps, reuse of finished runs, ΔBLEU intervals."""

import csv
import io
import json
import statistics

import numpy as np
import pytest

from ablate.report.results import load_results, references
from ablate.report.significance import bleu_statistics, corpus_bleu, delta_interval
from tests.conftest import ROOT, cli

SMOKE = ROOT / "experiments" / "smoke.yaml"
SPLIT = "test_2017_mscoco"  # smoke's test set
# 40 steps, and greedy decoding of at most 5 extra tokens: a model this young runs to its length limit
QUICK = (
    "training: {max_steps: 40, validate_every: 20, checkpoint_every: null}\ndata: {max_pairs: 400}\n"
    "evaluation: {beam_size: 1, max_extra_len: 5}"
)


def rows(text):
    return {r["run"]: r for r in csv.DictReader(io.StringIO(text))}


def result(directory):
    return json.loads((directory / "result.json").read_text())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """smoke's baseline and pre_ln at 2 rates, one seed, 40 steps each (tests/test_report.py has seeds)."""
    root = tmp_path_factory.mktemp("lr")
    spec = root / "lr.yaml"
    spec.write_text(
        f"name: lr\nextends: {SMOKE}\n{QUICK}\nlr_sweep: [0.001, 0.01]\n"
        "variants: {pre_ln: {model.norm_placement: pre_ln}}\n"
    )
    run = cli("run", str(spec), "--results", str(root / "results"))
    assert run.returncode == 0, run.stderr
    return root / "results" / "lr"


def test_every_run_trains_at_every_rate_and_seed(sweep):
    names = sorted(p.name for p in (sweep / "runs").iterdir())
    assert names == ["baseline,lr=0.001", "baseline,lr=0.01", "pre_ln,lr=0.001", "pre_ln,lr=0.01"]
    for name in names:
        for seed in (1,):
            data = result(sweep / "runs" / name / f"seed-{seed}")
            spec = (sweep / "runs" / name / f"seed-{seed}" / "config.yaml").read_text()
            assert data["arm"] == name.split(",")[0] and f"lr: {data['lr']}" in spec
            assert data["init_valid_loss"] > data["valid_loss"]  # learned something in 40 steps


def test_sensitivity_table_follows_its_definition(sweep):
    exp = load_results(sweep)
    report = cli("report", str(sweep))
    assert report.returncode == 0, report.stderr
    assert "learning-rate sensitivity" in report.stdout and "Wortsman" in report.stdout
    table = rows((sweep / "report" / "lr.csv").read_text())
    for arm in ("baseline", "pre_ln"):
        losses = {}
        for lr in (0.001, 0.01):
            jobs = exp.runs[f"{arm},lr={lr:g}"]
            losses[lr] = statistics.fmean(min(j.result.valid_loss, j.result.init_valid_loss) for j in jobs)
        best = min(losses, key=losses.get)
        assert float(table[arm]["best lr"]) == best
        assert float(table[arm]["sensitivity"]) == pytest.approx(statistics.fmean(losses.values()) - losses[best],
                                                                 abs=1e-3)  # fmt: skip
        bleu = statistics.fmean(j.result.bleu(SPLIT) for j in exp.runs[f"{arm},lr={best:g}"])
        assert float(table[arm]["BLEU at best lr"]) == pytest.approx(bleu, abs=0.01)
    for name in ["lr.png", "lr.svg", "lr.md", "lr.tex", "lr.html"]:
        assert (sweep / "report" / name).stat().st_size > 100, name


def test_each_run_is_compared_with_the_baseline_at_the_same_rate_and_at_its_best(sweep):
    every = rows(cli("report", str(sweep), "--format", "csv", "--no-files").stdout)
    exp = load_results(sweep)
    for lr in ("0.001", "0.01"):
        mean = {arm: statistics.fmean(j.result.bleu(SPLIT) for j in exp.runs[f"{arm},lr={lr}"])
                for arm in ("baseline", "pre_ln")}  # fmt: skip
        assert float(every[f"pre_ln,lr={lr}"]["ΔBLEU"]) == pytest.approx(mean["pre_ln"] - mean["baseline"], abs=0.011)
        assert every[f"baseline,lr={lr}"]["ΔBLEU"] == ""

    best = cli("report", str(sweep), "--at", "best-lr", "--format", "csv", "--no-files")
    assert best.returncode == 0, best.stderr
    table = rows(best.stdout)
    assert list(table) == ["baseline", "pre_ln"]
    lr = rows((sweep / "report" / "lr.csv").read_text())
    for arm in table:
        assert f"lr={float(lr[arm]['best lr']):g}" in table[arm]["differs"]


def test_rates_come_from_the_flag_too_and_bad_ones_get_one_line(tmp_path, write):
    path = write("e.yaml", f"name: e\nextends: {SMOKE}\n")
    listed = cli("validate", str(path), "--lr-sweep", "1e-3,2e-3")
    assert listed.returncode == 0 and "baseline,lr=0.002" in listed.stdout and "baseline,lr=0.001" in listed.stdout
    bad = cli("run", str(path), "--lr-sweep", "1e-3,-1")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "positive learning rates" in bad.stderr
    noam = write("noam.yaml", f"name: noam\nextends: {SMOKE}\ntraining: {{schedule: noam}}\nlr_sweep: [0.001]\n")
    bad = cli("validate", str(noam))
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"{noam}: lr_sweep: run 'baseline' has schedule 'noam', which takes no lr; "
        "sweep one that does: inverse_sqrt, linear_warmup, constant, linear_decay, wsd"
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "runs").mkdir()
    bad = cli("report", str(plain), "--at", "best-lr")
    assert bad.returncode == 2 and "holds no learning-rate sweep" in bad.stderr


def test_a_shared_baseline_trains_once_and_both_tables_show_it(tmp_path, write):
    first = write("first.yaml", f"name: first\nextends: {SMOKE}\n{QUICK}\n")
    second = write("second.yaml", f"""name: second
extends: {SMOKE}
{QUICK}
variants:
  gelu: {{model.feedforward: gelu}}
  same_as_baseline: {{model.feedforward: relu}}
""")  # fmt: skip
    results = tmp_path / "results"
    run = cli("run", str(first), "--results", str(results), "--only", "baseline")
    assert run.returncode == 0, run.stderr
    run = cli("run", str(second), "--results", str(results))
    assert run.returncode == 0, run.stderr
    assert "1 to train" in run.stdout  # gelu; the baseline and its twin are copied
    trained = result(results / "first" / "runs" / "baseline" / "seed-1")
    for name in ("baseline", "same_as_baseline"):
        copy = result(results / "second" / "runs" / name / "seed-1")
        assert copy["reused_from"] == "first/runs/baseline/seed-1" and copy["run"] == name
        assert copy["scores"] == trained["scores"] and copy["config_hash"] == trained["config_hash"]
        assert "reused" in copy["note"]
        hyps = results / "second" / "runs" / name / "seed-1" / "hypotheses" / f"{SPLIT}.txt"
        assert hyps.read_text() == (results / "first" / "runs" / "baseline" / "seed-1" / "hypotheses" /
                                    f"{SPLIT}.txt").read_text()  # fmt: skip
    for experiment in ("first", "second"):
        with open(results / experiment / "summary.csv") as f:
            table = {r["run"]: r for r in csv.DictReader(f)}
        assert float(table["baseline"]["BLEU"]) == pytest.approx(trained["scores"][SPLIT]["bleu"], abs=0.01)
    with open(results / "second" / "summary.csv") as f:
        assert "reused" in {r["run"]: r for r in csv.DictReader(f)}["baseline"]["note"]

    again = cli("run", str(second), "--results", str(results), "--fresh", "--only", "baseline")
    assert again.returncode == 0 and "1 to train" in again.stdout
    assert "reused_from" not in result(results / "second" / "runs" / "baseline" / "seed-1")


def test_a_sweep_point_equal_to_the_plain_run_is_reused(tmp_path, write):
    plain = write("plain.yaml", f"name: plain\nextends: {SMOKE}\n{QUICK}\n")  # smoke's lr is 0.003
    swept = write("swept.yaml", f"name: swept\nextends: {SMOKE}\n{QUICK}\nlr_sweep: [0.003, 0.01]\n")
    results = tmp_path / "results"
    assert cli("run", str(plain), "--results", str(results), "--only", "baseline").returncode == 0
    dry = cli("run", str(swept), "--results", str(results), "--only", "baseline", "--dry-run")
    assert "reuse: the same spec and seed finished as plain/runs/baseline/seed-1" in dry.stdout
    run = cli("run", str(swept), "--results", str(results), "--only", "baseline")
    assert run.returncode == 0 and "1 to train" in run.stdout
    copy = result(results / "swept" / "runs" / "baseline,lr=0.003" / "seed-1")
    assert copy["reused_from"] == "plain/runs/baseline/seed-1" and copy["lr"] == 0.003


def test_with_one_seed_the_interval_is_test_set_sampling_alone_and_says_so(sweep):
    table = rows(cli("report", str(sweep), "--format", "csv", "--no-files").stdout)
    exp = load_results(sweep)
    refs = references(exp.runs["baseline,lr=0.01"][0].config, SPLIT)

    def stats(run):
        return np.stack([bleu_statistics(j.hypotheses(SPLIT), refs, False) for j in exp.runs[run]])

    expected = delta_interval(stats("baseline,lr=0.01"), stats("pre_ln,lr=0.01"), corpus_bleu)
    row = table["pre_ln,lr=0.01"]
    assert row["CI over"] == "sentences" and not expected.seeds
    assert float(row["ΔBLEU lo"]) == pytest.approx(expected.low, abs=0.006)
    assert float(row["ΔBLEU hi"]) == pytest.approx(expected.high, abs=0.006)
    md = cli("report", str(sweep), "--format", "md", "--no-files").stdout
    assert "seed-to-seed variance is not covered" in md and "p: sacreBLEU's paired bootstrap" in md
