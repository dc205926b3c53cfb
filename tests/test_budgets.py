"""Budget points (evaluation.budgets): a point is the run of that length, a wsd branch is a wsd run of that length.

The equality tests compare, sentence for sentence, a budget point's hypotheses with those of a run trained to
that budget alone with the same seed; on one machine and thread count training is deterministic, so anything
but identity is a bug.
"""

import csv
import itertools
import json
import math
import signal
import time
from pathlib import Path

import pytest

import ablate
from ablate.errors import SpecError
from ablate.record import BudgetPoint, RunResult, Score, Status
from ablate.report.budgets import rank_agreement, verdict
from ablate.report.results import ExperimentResults, JobRecord
from ablate.report.significance import Interval, holm, lacks_spread, no_spread_note, seeds_for, seeds_needed
from ablate.rundir import POINT, budget_dir, budget_name, write_result
from ablate.train.budgets import BudgetPoints
from ablate.train.schedules import SCHEDULE
from ablate.train.spec import TrainingSpec
from tests.conftest import cli, trained_experiment
from tests.test_runner import losses, result, start

WSD = "{name: wsd, lr: 0.003, warmup: 20, cooldown: 0.5}"
# Two budget points, 100 and 200 steps, checkpoints 10 steps apart and the last 3 averaged, so that a point's
# average reaches back before a branch's fork. `alone100` and `wsd_alone100` are the 100-step runs to compare with.
EXPERIMENT = f"""
name: points
model: {{d_model: 32, heads: 2, d_ff: 64, encoder_layers: 1, decoder_layers: 1, dropout: 0.1}}
tokenizer: {{vocab_size: 500}}
data: {{max_pairs: 2000, test: [test_2017_mscoco]}}
training:
  schedule: {{name: inverse_sqrt, lr: 0.003, warmup: 20}}
  max_tokens: 2000
  max_steps: 200
  checkpoint_every: 10
  validate_every: 100
  valid_bleu_pairs: 20
evaluation: {{average_checkpoints: 3, budgets: [100, 200], beam_size: 1, max_extra_len: 5}}
variants:
  alone100: {{training.max_steps: 100, evaluation.budgets: null}}
  wsd: {{training.schedule: {WSD}}}
  wsd_alone100: {{training.schedule: {WSD}, training.max_steps: 100, evaluation.budgets: null}}
"""
SPLIT = "test_2017_mscoco"  # 461 sentences: smoke's test set
ONE_THREAD = ["--threads-per-run", "1"]  # thread counts change round-off: every run compared here trains on one


def run_dir(root, run):
    return root / "points" / "runs" / run / "seed-1"


def hypotheses(directory):
    return (directory / "hypotheses" / f"{SPLIT}.txt").read_text().splitlines()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return trained_experiment(tmp_path_factory, "points", EXPERIMENT, *ONE_THREAD)


def test_a_budget_point_is_the_run_trained_to_that_budget_alone(sweep):
    _, root = sweep
    point = budget_dir(run_dir(root, "baseline"), 100)
    alone = run_dir(root, "alone100")
    assert hypotheses(point) == hypotheses(alone)
    record, single = json.loads((point / POINT).read_text()), result(root / "points", "alone100")
    assert record["averaged_steps"] == single["averaged_steps"] == [80, 90, 100]
    assert record["valid_loss"] == single["valid_loss"]
    assert record["scores"][SPLIT]["bleu"] == single["scores"][SPLIT]["bleu"]
    # the trunk went on: its end is the run's, and its training was not disturbed by the point's evaluation
    whole = result(root / "points", "baseline")
    assert [p["budget"] for p in whole["budget_points"]] == [100, 200]
    assert whole["budget_points"][-1]["valid_loss"] == whole["valid_loss"]
    assert losses(root / "points", "baseline")[:100] == losses(root / "points", "alone100")


def test_a_wsd_branch_is_the_wsd_run_of_that_length(sweep):
    _, root = sweep
    trunk = run_dir(root, "wsd")
    point = budget_dir(trunk, 100)
    assert hypotheses(point) == hypotheses(run_dir(root, "wsd_alone100"))
    record = json.loads((point / POINT).read_text())
    single = result(root / "points", "wsd_alone100")
    assert record["valid_loss"] == single["valid_loss"] and record["averaged_steps"] == single["averaged_steps"]
    assert record["branch"]["from_step"] == 50 and record["branch"]["steps"] == 50  # (1 - 0.5) * 100
    branch_losses = [
        (r["step"], r["loss"]) for r in map(json.loads, (point / "metrics.jsonl").read_text().splitlines())
    ]
    assert branch_losses == losses(root / "points", "wsd_alone100")[50:]  # the cooldown, step by step
    assert not (point / "checkpoints").exists()  # evaluated and dropped
    # the trunk went on at the constant rate from where it forked: its first 100 steps are the 200-step run's
    whole = result(root / "points", "wsd")
    assert whole["branch_steps"] == 50
    trunk_lr = [r["lr"] for r in map(json.loads, (trunk / "metrics.jsonl").read_text().splitlines()) if "lr" in r]
    assert trunk_lr[20:100] == [0.003] * 80 and trunk_lr[-1] < 0.003 * 0.1


def test_kill_9_inside_a_branch_resumes_the_branch(sweep, tmp_path):
    path, straight = sweep
    args = [str(path), "--only", "wsd", "--results", str(tmp_path), *ONE_THREAD]
    proc = start(*args)
    branch = budget_dir(run_dir(tmp_path, "wsd"), 100)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:  # a branch checkpoint past the fork (step 50)
        info = branch / "checkpoints" / "last.json"
        if info.is_file() and json.loads(info.read_text() or "{}").get("step", 0) >= 60:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not (branch / POINT).exists(), "the kill came after the branch was scored"
    resumed = cli("run", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert hypotheses(branch) == hypotheses(budget_dir(run_dir(straight, "wsd"), 100))
    assert hypotheses(run_dir(tmp_path, "wsd")) == hypotheses(run_dir(straight, "wsd"))
    killed, whole = result(tmp_path / "points", "wsd"), result(straight / "points", "wsd")
    for key in ("valid_loss", "averaged_steps", "branch_steps", "train_target_tokens"):
        assert killed[key] == whole[key], key
    assert [p["valid_loss"] for p in killed["budget_points"]] == [p["valid_loss"] for p in whole["budget_points"]]
    assert losses(tmp_path / "points", "wsd") == losses(straight / "points", "wsd")


def test_a_scored_point_is_not_evaluated_again(tmp_path):
    spec = TrainingSpec(max_steps=400)
    (budget_dir(tmp_path, 100)).mkdir(parents=True)
    (budget_dir(tmp_path, 100) / POINT).write_text("{}")

    class At:  # what BudgetPoints reads of a trainer
        schedule = SCHEDULE.build(SCHEDULE.parse("inverse_sqrt"), d_model=32)

        def __init__(self, step):
            self.step = step

        def used(self):
            return {"max_steps": self.step}

    points = BudgetPoints([100, 200, 400], spec, tmp_path, "hash", rank=0)
    assert points.due(At(150)) == [] and points.due(At(200)) == [200]
    points.forget()  # a run that starts over
    assert points.due(At(200)) == [100, 200] and not (tmp_path / "budgets").exists()


def test_wsd_is_warmup_then_constant_then_a_cooldown_over_the_last_fraction():
    def lr(progress, step=1000, **params):
        spec = {"name": "wsd", "lr": 1e-3, "warmup": 100, "cooldown": 0.2} | params
        return SCHEDULE.build(SCHEDULE.parse(spec), d_model=512)(step, progress)

    assert lr(0.0, step=50) == pytest.approx(5e-4)  # warming up
    assert lr(0.0) == lr(0.5) == lr(0.79) == 1e-3
    assert lr(0.8) == pytest.approx(1e-3)  # the cooldown starts from the constant rate
    # 1-sqrt (Hägele et al. 2024): lr * (1 - sqrt(t)), t the fraction of the cooldown done
    assert lr(0.85) == pytest.approx(1e-3 * (1 - math.sqrt(0.25)))
    assert lr(0.85, shape="linear") == pytest.approx(1e-3 * 0.75)
    assert lr(0.85, final=0.1) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))
    assert lr(1.0) == pytest.approx(0.0, abs=1e-15) and lr(1.0, final=0.1) == pytest.approx(1e-4)


@pytest.mark.parametrize("name", sorted(SCHEDULE.parts))
def test_a_schedule_that_says_it_ignores_the_length_ignores_it(name):
    """uses_length decides whether budget points are one run: it must say what the schedule does."""
    schedule = SCHEDULE.build(SCHEDULE.parse(name), d_model=512)
    rates = {schedule(step, progress) for step in (1, 50, 5000, 50_000) for progress in (0.0, 0.5, 0.95)}
    by_step = {schedule(step, 0.0) for step in (1, 50, 5000, 50_000)}
    assert (len(rates) > len(by_step)) == type(schedule).uses_length


@pytest.mark.parametrize(
    ("training", "budgets", "expected"),
    [
        ("{max_steps: 100, schedule: linear_decay}", "[50, 100]",
         "schedule 'linear_decay' depends on the run's length, so a budget point is not the run of that length: "
         "use wsd"),
        ("{max_steps: 100}", "[50, 90]",
         "evaluation.budgets: the last budget point (90) must be the run's end, training.max_steps (100)"),
        ("{max_steps: 100}", "[50, 50, 100]", "evaluation.budgets: must increase, got [50, 50, 100]"),
        ("{max_steps: 100}", "[50.5, 100]", "evaluation.budgets: steps are whole numbers, got [50.5, 100]"),
        ("{max_steps: 100, max_seconds: 60}", "[50, 100]",
         "evaluation.budgets: budget points need the run's length in exactly one of training.max_steps, "
         "max_target_tokens, max_flops, got training.max_steps, training.max_seconds"),
    ],
)  # fmt: skip
def test_budget_points_that_cannot_mean_a_run_of_that_length_are_a_spec_error(write, training, budgets, expected):
    text = f"name: e\nmodel: {{d_model: 32, heads: 2}}\ntraining: {training}\nevaluation: {{budgets: {budgets}}}\n"
    path = write("e.yaml", text)
    with pytest.raises(SpecError) as info:
        ablate.load_experiment(path)
    assert any(expected in line for line in info.value.lines), info.value.lines


def test_a_bad_budget_point_stops_the_cli_with_one_line(write):
    text = "name: e\ntraining: {max_steps: 100, schedule: linear_decay}\nevaluation: {budgets: [50, 100]}\n"
    path = write("e.yaml", text)
    done = cli("run", str(path), "--dry-run")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "use wsd" in done.stderr and str(path) in done.stderr


def test_budget_names_are_the_budget_as_people_write_it():
    assert [budget_name(b) for b in (2000, 2000.0, 0.5, 1.5e18)] == ["2000", "2000", "0.5", "1.5e+18"]


def report(*args):
    done = cli("report", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_report_tables_every_run_at_every_budget_with_tau_verdicts_and_a_plot(sweep):
    _, root = sweep
    out = report(str(root / "points"))
    assert "points: effect against compute" in out and "points: rank agreement across" in out
    assert "Verdicts, first against last budget point" in out and "\n  wsd: " in out
    folder = root / "points" / "report"
    rows = list(csv.DictReader((folder / "budgets.csv").open()))
    # the 100-step runs are at their end there; the trunks at both points
    assert [(r["run"], r["budget"]) for r in rows] == [
        ("baseline", "100"), ("baseline", "200"), ("alone100", "100"), ("wsd", "100"), ("wsd", "200"),
        ("wsd_alone100", "100"),
    ]  # fmt: skip
    runs = root / "points" / "runs"
    for row in rows:
        if row["run"] not in ("wsd", "baseline"):
            continue
        b = float(row["budget"])
        bleu = {run: point(runs / run / "seed-1", b)["scores"][SPLIT]["bleu"] for run in ("baseline", "wsd")}
        assert float(row["BLEU"]) == bleu[row["run"]]
        if row["run"] == "wsd":  # against the baseline at the same budget, with its interval around it
            assert float(row["ΔBLEU"]) == pytest.approx(bleu["wsd"] - bleu["baseline"], abs=0.011)
            assert float(row["ΔBLEU lo"]) <= float(row["ΔBLEU"]) <= float(row["ΔBLEU hi"])
            # one seed a run: its interval covers test sentences alone, so no verdict about the architecture
            assert row["verdict"] == "undecided (1 seed)", row
    assert (folder / "budgets.svg").is_file() and "Effect against compute" in (folder / "index.html").read_text()
    agreement = {r["between"]: r for r in csv.DictReader((folder / "agreement.csv").open())}
    assert agreement["100 and 200"]["runs"] == "2"  # baseline and wsd reached both points; τ needs 3 runs
    assert "Kendall τ between the runs' order" in (folder / "agreement.md").read_text()
    # the built-in reproducibility check: each point against the run trained to that budget alone, here exact
    checked = {(r["run"], r["budget"]): r for r in csv.DictReader((folder / "reproduced.csv").open())}
    assert checked[("baseline", "100")]["trained alone as"] == "points/runs/alone100/seed-1"
    assert checked[("wsd", "100")]["trained alone as"] == "points/runs/wsd_alone100/seed-1"
    assert {(r["machine"], r["verdict"]) for r in checked.values()} == {("same: exact", "identical")}
    # one seed a run: no seed spread to plan with, so an unresolved row gets no seed count, and a note names it;
    # a difference of exactly 0 with an interval of 0 (alone100 at 100: the same hypotheses) needs no spread, as
    # no seeds resolve it; a tie of two BLEUs whose hypotheses differ has an interval, and is unresolved
    # The csv rounds the interval to 2 decimals and the report judges it unrounded: an end that rounds to 0 (an
    # interval of [-0.09, -0.00], seen on an AVX2 EPYC) may or may not include 0, and either note is right for it.
    for name, table in (("budgets", rows), ("table", list(csv.DictReader((folder / "table.csv").open())))):
        unresolved, edge = {}, set()
        for r in table:
            if r["ΔBLEU lo"] and float(r["ΔBLEU lo"]) <= 0 <= float(r["ΔBLEU hi"]):
                lo, hi = float(r["ΔBLEU lo"]), float(r["ΔBLEU hi"])
                if lo == hi == 0:
                    assert r["seeds for 80%"] == "> 1000", r
                else:
                    assert not r.get("seeds for 80%"), r
                    unresolved.setdefault(r["run"], []).append(r.get("budget"))
                    if not lo < 0 < hi:
                        edge.add((r["run"], r.get("budget")))
        said = [line.strip() for line in (folder / f"{name}.md").read_text().splitlines() if "not computed for" in line]
        allowed = []
        for left_out in itertools.chain.from_iterable(
            itertools.combinations(sorted(edge, key=str), k) for k in range(len(edge) + 1)
        ):
            kept = {run: [b for b in at if (run, b) not in left_out] for run, at in unresolved.items()}
            named = [run if name == "table" else f"{run} at {', '.join(at)}" for run, at in kept.items() if at]
            allowed.append([no_spread_note(named)] if named else [])
        assert said in allowed, (name, said, allowed)


def test_a_row_gets_a_seed_count_or_says_why_not():
    resolved, unresolved = Interval(1.0, 0.5, 1.5, True, 10), Interval(0.4, -0.3, 1.1, True, 10)
    identical = Interval(0.0, 0.0, 0.0, False, math.inf)  # the same hypotheses on both sides
    assert seeds_for(resolved, 0.5) is None and not lacks_spread(resolved, None)
    assert seeds_for(unresolved, 0.5) == seeds_needed(0.4, 0.5) == "26"
    assert seeds_for(unresolved, None) is None and lacks_spread(unresolved, None)  # one seed an arm: the note
    assert seeds_for(identical, None) == "> 1000" and not lacks_spread(identical, None)
    assert seeds_for(None, 0.5) is None and not lacks_spread(None, None)


def point(directory, budget):
    """A job's record at a budget point: point.json before its end, result.json's last point at it."""
    whole = json.loads((directory / "result.json").read_text())
    return next(p for p in whole["budget_points"] if float(p["budget"]) == budget)


def test_at_budget_tables_every_run_as_it_stood_there(sweep):
    _, root = sweep
    text = report(str(root / "points"), "--at-budget", "100", "--format", "csv", "--no-files")
    rows = {r["run"]: r for r in csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))}
    assert set(rows) == {"baseline", "alone100", "wsd", "wsd_alone100"}  # the 100-step runs at their end
    assert rows["alone100"]["ΔBLEU"] in ("0.0", "0")  # the same model as the baseline's point
    for run in ("baseline", "wsd"):
        record = json.loads((budget_dir(run_dir(root, run), 100) / POINT).read_text())
        assert float(rows[run]["BLEU"]) == record["scores"][SPLIT]["bleu"]
        assert float(rows[run]["valid loss"]) == round(record["valid_loss"], 3)


def test_at_a_budget_no_run_reached_is_one_line(sweep):
    _, root = sweep
    done = cli("report", str(root / "points"), "--at-budget", "150", "--no-files")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--at-budget 150:" in done.stderr and "(budget points: 100, 200)" in done.stderr


def test_seeds_needed_are_cohens_two_sample_figures():
    """80% power at α = 0.05, two-sided: 64 a group for d = 0.5, 26 for d = 0.8, 17 for d = 1 (Cohen 1988)."""
    assert [seeds_needed(d, 1.0) for d in (0.5, 0.8, 1.0)] == ["64", "26", "17"]
    assert seeds_needed(0.25, 0.5) == "64"  # only the ratio counts
    assert seeds_needed(0.0, 1.0) == "> 1000" and seeds_needed(0.01, 1.0) == "> 1000"


def interval(delta, p, df=1e9):
    """An interval Δ ± 1.96·se whose two-sided p (normal, as df → ∞) is `p`."""
    from scipy.stats import norm

    se = abs(delta) / norm.isf(p / 2)
    return Interval(delta, delta - 1.959964 * se, delta + 1.959964 * se, True, df)


def scored(bleu: float) -> dict[str, Score]:
    """A test split's scores with this BLEU; the rest of them does not matter here."""
    return {SPLIT: Score(bleu=bleu, chrf=0.0, bleu_signature="-", chrf_signature="-")}


def test_holm_keeps_the_rows_that_survive_the_step_down():
    ps = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}  # plain: all four below 0.05
    rows = {(run, 100.0): interval(1.0, p).p_value() for run, p in ps.items()}
    assert rows == pytest.approx({(run, 100.0): p for run, p in ps.items()}, rel=1e-5)  # the interval's own p
    # sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, then 0.03 > 0.05/2 stops it
    assert holm(rows) == {("d", 100.0), ("a", 100.0)}
    # the family-wise rate is not the intervals' level: p = 0.06 alone survives at 0.10 from a 95% interval
    assert holm({"e": interval(1.0, 0.06).p_value()}, alpha=0.10) == {"e"}
    assert holm({"e": interval(1.0, 0.06).p_value()}) == set()


@pytest.mark.parametrize(
    ("first", "last", "expected"),
    [
        ((1.0, 0.001), (1.1, 0.001), "holds"),
        ((1.0, 0.001), (3.0, 0.0001), "grows"),
        ((3.0, 0.0001), (1.0, 0.001), "shrinks"),
        ((1.0, 0.001), (-1.0, 0.001), "flips"),
        ((2.0, 0.0001), (0.05, 0.9), "vanishes"),
        ((0.05, 0.9), (2.0, 0.0001), "emerges"),
        ((0.3, 0.2), (0.4, 0.3), "not resolved"),
        ((1.0, 0.04), (0.2, 0.7), "not resolved"),  # the effect went inside 0, but not resolvedly below its start
    ],
)
def test_a_verdict_is_said_only_where_the_intervals_support_it(first, last, expected):
    assert verdict(interval(*first), interval(*last)) == expected


def test_the_budget_plot_says_what_its_bands_cover():
    from ablate.report.plots import covered

    both, sentences = interval(1.0, 0.5), Interval(1.0, 0.0, 2.0, seeds=False, df=1e9)
    assert both.seeds and covered({("a", 1): both}) == "seeds and sentences"
    assert covered({("a", 1): sentences}) == "test sentences; one seed an arm"
    assert "sentences alone where an arm has one seed" in covered({("a", 1): both, ("b", 1): sentences})


def test_kendall_tau_between_budgets_and_between_seeds():
    def view(bleus):  # run -> BLEU of seeds 1 and 2
        exp = ExperimentResults("e", Path("."))
        for run, (s1, s2) in bleus.items():
            for seed, bleu in ((1, s1), (2, s2)):
                result = RunResult(run=run, seed=seed, status=Status.COMPLETED, scores=scored(bleu))
                exp.runs.setdefault(run, []).append(JobRecord(Path(run), result, {}))
        return exp

    early = view({"a": (1, 1), "b": (2, 2), "c": (3, 3), "d": (4, 4)})
    late = view({"a": (1, 1), "b": (2, 2), "c": (4, 4), "d": (3, 4.5)})  # c and d change places in the mean
    frame, _ = rank_agreement(early, {100.0: early, 200.0: late}, SPLIT)
    means = dict(zip(frame["between"], frame["τ of means"], strict=True))
    single = dict(zip(frame["between"], frame["τ of single seeds"], strict=True))
    assert means["100 and 200"] == round((5 - 1) / 6, 2)  # 5 concordant pairs, 1 discordant, of 6
    # across budgets, never the same seed twice: seed 1 at 100 against seed 2 at 200 (1, 2, 3, 4 against
    # 1, 2, 4, 4.5: all concordant) and seed 2 at 100 against seed 1 at 200 (against 1, 2, 4, 3: 5 of 6)
    assert single["100 and 200"] == round((1 + 4 / 6) / 2, 2)
    assert single["seeds at 100"] == 1.0 and single["seeds at 200"] == round((5 - 1) / 6, 2)  # the ceilings
    assert means["seeds at 100"] is None  # a mean has no seed-to-seed counterpart


def test_a_reproduction_is_exact_only_on_the_same_cpu_and_torch(tmp_path):
    """Identical hypotheses are demanded of CPU runs with the same device, precision and torch alone: GPU kernels
    are not bit-deterministic, and another torch has other kernels."""
    from ablate.report.budgets import _reproduced

    def job(where, **result):
        d = tmp_path / where / "runs" / "r" / "seed-1"
        (d / "hypotheses").mkdir(parents=True)
        (d / "hypotheses" / f"{SPLIT}.txt").write_text("a\nb\n")
        record = RunResult(run="r", seed=1, status=Status.COMPLETED, gpus=0, device="cpu X, 1 thread",
                           precision="fp32", torch="2.13.0", scores=scored(10.0)).model_copy(update=result)  # fmt: skip
        write_result(d, record)
        point = BudgetPoint(budget=100.0, scores=scored(10.0))
        return JobRecord(d, record.model_copy(update={"budget_points": [point]}), {}), point

    mine, point = job("mine")
    other = job("alone")[0].directory
    assert _reproduced("r", mine, point, other, SPLIT)["machine"] == "same: exact"
    for i, change in enumerate(({"gpus": 1, "device": "NVIDIA H100"}, {"torch": "2.14.0"}, {"precision": "bf16"})):
        mine, point = job(f"mine-{i}", **change)
        theirs = job(f"alone-{i}", **change)[0].directory if "gpus" in change else other  # GPU: both on one model
        assert _reproduced("r", mine, point, theirs, SPLIT)["machine"].startswith("other"), change


def test_a_spec_that_pins_the_precision_also_finds_the_same_spec_with_auto():
    from ablate.report.budgets import _alone_hashes
    from ablate.rundir import config_hash

    spec = {"training": {"max_steps": 800, "precision": "fp32"}, "evaluation": {"budgets": [100, 800]}}
    hashes = _alone_hashes(JobRecord(Path("."), RunResult(run="r", seed=1, status=Status.COMPLETED), spec),
                           "max_steps", 100.0)  # fmt: skip
    assert hashes == [config_hash({"training": {"max_steps": 100, "precision": "fp32"}, "evaluation": {}}),
                      config_hash({"training": {"max_steps": 100, "precision": "auto"}, "evaluation": {}})]  # fmt: skip
    auto = {"training": {"max_steps": 800, "precision": "auto"}, "evaluation": {"budgets": [100, 800]}}
    assert len(_alone_hashes(JobRecord(Path("."), RunResult(run="r", seed=1, status=Status.COMPLETED), auto),
                             "max_steps", 100.0)) == 1  # fmt: skip
