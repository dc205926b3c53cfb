"""A design (design.json) declared once: its margin cannot move once an experiment has results, `ablate report
--margin` is a view and says so, and `--dry-run` checks a design as the run does. Through the CLI."""

import shutil

import pytest

from tests.conftest import ROOT, cli

PE = str(ROOT / "experiments" / "pe.yaml")


@pytest.fixture
def finished(tmp_path):
    """A copy of the committed results/pe: 12 finished runs and a design declaring margin 1."""
    shutil.copytree(ROOT / "results" / "pe", tmp_path / "pe")
    return tmp_path


def test_another_margin_on_an_experiment_with_results_is_refused_and_nothing_is_written(finished):
    design = finished / "pe" / "design.json"
    before = design.read_bytes()
    files = sorted(p for p in (finished / "pe").rglob("*"))
    for extra in ([], ["--dry-run"]):
        run = cli("run", PE, "--results", str(finished), "--margin", "3", *extra)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith(f"{design}: --margin 3, but margin 1 was declared") and "has results" in line
        assert design.read_bytes() == before and sorted((finished / "pe").rglob("*")) == files


def test_a_first_margin_after_the_results_is_refused(tmp_path):
    shutil.copytree(ROOT / "results" / "pe", tmp_path / "pe")
    (tmp_path / "pe" / "design.json").unlink()
    run = cli("run", PE, "--results", str(tmp_path), "--margin", "1")
    assert run.returncode == 2, run.stderr
    assert "no margin was declared before" in run.stderr and not (tmp_path / "pe" / "design.json").exists()


def test_the_first_run_declares_the_margin_and_when(tmp_path):
    import json

    run = cli("run", PE, "--results", str(tmp_path), "--margin", "2", "--dry-run")
    assert run.returncode == 0 and not (tmp_path / "pe").exists(), run.stderr  # a dry run writes nothing
    assert "declared by this run" in run.stdout
    from ablate.sweep.design import declare
    from ablate.sweep.experiment import load_experiment

    declare(load_experiment(PE), tmp_path, margin=2.0)
    record = json.loads((tmp_path / "pe" / "design.json").read_text())
    assert record["margin"] == 2.0 and record["declared_at"].startswith("20")
    declare(load_experiment(PE), tmp_path, margin=3.0)  # no results yet: still open
    assert json.loads((tmp_path / "pe" / "design.json").read_text())["margin"] == 3.0


def test_the_report_at_another_margin_is_a_view_and_says_so(tmp_path):
    """On a copy of results/width (3 runs, a report of seconds) with a design declaring margin 1."""
    import json

    from ablate.report.verdicts import declared

    shutil.copytree(ROOT / "results" / "width", tmp_path / "width", ignore=shutil.ignore_patterns("report"))
    (tmp_path / "width" / "design.json").write_text(json.dumps({"margin": 1.0, "seeds": [1], "first": 1}))
    run = cli("report", str(tmp_path / "width"), "--margin", "3", "--no-files", "--format", "md")
    assert run.returncode == 0, run.stderr
    assert "margin 3 (a view; declared: 1)" in run.stdout
    design = tmp_path / "width" / "design.json"
    assert declared(tmp_path / "width").margin_text() == f"margin 1 (declared in {design})"
    assert declared(tmp_path / "width", 1.0).margin_text() == declared(tmp_path / "width").margin_text()  # no view


@pytest.mark.parametrize(
    "flags",
    [
        ["--until-decided", "--max-seeds", "2"],
        ["--until-decided", "--max-seeds", "5", "--seeds", "2"],
        ["--until-decided", "--seeds", "1,2,3,4,5", "--max-seeds", "4"],
    ],
)
def test_dry_run_and_run_refuse_the_same_designs(tmp_path, flags):
    """The issue's three: a dry run that exits 0 where the run exits 2 plans what cannot run."""
    dry = cli("run", PE, "--results", str(tmp_path / "dry"), "--dry-run", *flags)
    real = cli("run", PE, "--results", str(tmp_path / "real"), *flags)
    assert dry.returncode == real.returncode == 2, (dry.stderr, real.stderr)
    assert dry.stderr.strip() == real.stderr.strip().replace(str(tmp_path / "real"), str(tmp_path / "dry"))
    assert len(real.stderr.strip().splitlines()) == 1 and not (tmp_path / "real" / "pe" / "runs").exists()


def test_dry_run_shows_the_design_the_worst_case_and_the_cost(tmp_path):
    run = cli("run", PE, "--results", str(tmp_path), "--dry-run", "--until-decided", "--max-seeds", "5")
    assert run.returncode == 0, run.stderr
    out = " ".join(run.stdout.split())
    assert "design: margin ±1 BLEU, α 0.05 spent over 3 looks" in out and "3 to 5 seeds a run" in out
    assert "worst case: at most 20 runs (4 runs x 5 seeds), at least 12" in out
    assert "cost: the worst case has 20 runs left: about " in out  # priced from the committed pe runs
    assert "finished runs of this experiment on" in out


def test_a_borrowed_seed_spread_is_declared_before_the_results(tmp_path, write):
    """seed_sd: a number is taken as known; {from: pe} is pooled over pe's runs of 2 seeds or more when first
    declared; either is fixed once the experiment has results, like the margin."""
    import json
    import statistics

    from ablate.errors import UserError
    from ablate.report.results import bleus, load_results
    from ablate.sweep.design import declare
    from ablate.sweep.experiment import load_experiment

    shutil.copytree(ROOT / "results" / "pe", tmp_path / "pe")
    pooled = write("pooled.yaml", f"name: pooled\nextends: {ROOT / 'experiments' / 'smoke.yaml'}\nmargin: 1.0\n"
                                  "seed_sd: {from: pe}\n")  # fmt: skip
    record = declare(load_experiment(pooled), tmp_path)
    pe = load_results(tmp_path / "pe")
    arms = [bleus(jobs, pe.split()) for jobs in pe.runs.values()]
    df = sum(len(b) - 1 for b in arms)
    sd = (sum((len(b) - 1) * statistics.variance(b) for b in arms) / df) ** 0.5
    assert (record.seed_sd, record.seed_sd_df, record.seed_sd_from) == (pytest.approx(sd, abs=1e-4), df, "pe")
    assert json.loads((tmp_path / "pooled" / "design.json").read_text())["seed_sd_from"] == "pe"

    known = write("known.yaml", f"name: known\nextends: {ROOT / 'experiments' / 'smoke.yaml'}\nseed_sd: 0.45\n")
    assert declare(load_experiment(known), tmp_path).seed_sd == 0.45
    # once the experiment has results, another spread is refused
    shutil.copytree(ROOT / "results" / "pe" / "runs", tmp_path / "known" / "runs")
    other = write("other.yaml", f"name: known\nextends: {ROOT / 'experiments' / 'smoke.yaml'}\nseed_sd: 0.9\n")
    with pytest.raises(UserError, match="a borrowed spread is fixed before the results"):
        declare(load_experiment(other), tmp_path)
    assert declare(load_experiment(known), tmp_path).seed_sd == 0.45  # the same one stands


def test_a_one_seed_row_reads_undecided_unless_it_borrows_a_spread():
    import numpy as np

    from ablate.report.decide import ONE_SEED, judge
    from ablate.report.significance import Spread, seed_interval

    bare = seed_interval(-2.0, 0.09, 1000, [30.0], [28.0])  # far outside its test-set interval
    borrowed = seed_interval(-2.0, 0.09, 1000, [30.0], [28.0], spread=Spread(0.3, np.inf, "declared"))
    assert bare.excludes_zero and not bare.seeds
    assert borrowed.borrowed == 0.3 and borrowed.se == pytest.approx((0.09 + 2 * 0.3**2) ** 0.5)
    assert judge({"bare": bare, "borrowed": borrowed}, 1.0, 0.05) == {"bare": ONE_SEED, "borrowed": "worse"}
