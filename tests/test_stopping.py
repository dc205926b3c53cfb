"""Early stopping (training.early_stopping) and which weights are scored (evaluation.select), through the CLI.

The rule is checked against the run's own validation curve, read back from metrics.jsonl and judged here
independently of ablate.train.stopping; the best checkpoint is shown to be the one scored by validating it
again: the loss of the scored model is the loss logged at the best step, to the digit.
"""

import csv
import json
import os
import signal
import subprocess
import sys

import pytest

from ablate.errors import UserError
from ablate.record import Status
from ablate.rundir import budget_dir
from ablate.sweep.experiment import load_experiment
from ablate.sweep.plan import Action, plan
from ablate.train.stopping import Watch
from tests.conftest import ROOT, cli, trained_experiment
from tests.test_runner import losses, result, start, wait_for_checkpoint

# Validation every 20 steps and a checkpoint at each; an improvement must exceed 0.15 nats, so that the curve
# of this tiny model flattens out well before the cap of 600 steps.
EXPERIMENT = """
name: stopping
model: {d_model: 32, heads: 2, d_ff: 64, encoder_layers: 1, decoder_layers: 1, dropout: 0.1}
tokenizer: {vocab_size: 500}
data: {max_pairs: 2000, test: [test_2017_mscoco]}
training:
  schedule: {name: inverse_sqrt, lr: 0.003, warmup: 20}
  max_tokens: 2000
  max_steps: 600
  checkpoint_every: 20
  validate_every: 20
  valid_bleu_pairs: 20
  early_stopping: {metric: valid_loss, patience: 2, min_delta: 0.15}
evaluation: {select: best, beam_size: 1, max_extra_len: 5}
variants:
  averaged: {evaluation.average_checkpoints: 3}
  capped: {training.max_steps: 100, evaluation.select: last,
           training.early_stopping: {metric: valid_loss, patience: 100}}
  points: {evaluation.select: last, evaluation.budgets: [100, 600]}
  improving: {training.max_steps: 100, training.early_stopping: {metric: valid_loss, patience: 100}}
"""
ONE_THREAD = ["--threads-per-run", "1"]


def curve(root, run):
    """(step, valid_loss) of each validation during training, as metrics.jsonl logged them: step 0 left out, and
    the last record, the validation of the weights the run's end scored."""
    records = [json.loads(line) for line in (root / "stopping" / "runs" / run / "seed-1" / "metrics.jsonl").open()]
    validations = [(r["step"], r["valid_loss"]) for r in records if "valid_loss" in r and r["step"] > 0]
    return validations[:-1]


def expected_stop(points, patience, min_delta):
    """Where the rule stops a curve: after `patience` validations in a row none of which is below the best by
    more than `min_delta`; (stop step, best step), or None when it never stops."""
    best, best_step, since = None, None, 0
    for step, loss in points:
        if best is None or best - loss > min_delta:
            best, best_step, since = loss, step, 0
        else:
            since += 1
            if since == patience:
                return step, best_step
    return None


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return trained_experiment(tmp_path_factory, "stopping", EXPERIMENT, *ONE_THREAD)


def last_improvement(points, min_delta):
    """The step of the last validation that improved on the best so far by more than `min_delta`."""
    best, best_step = None, None
    for step, loss in points:
        if best is None or best - loss > min_delta:
            best, best_step = loss, step
    return best_step


def test_a_run_stops_where_its_validation_curve_says(sweep):
    _, root = sweep
    r = result(root / "stopping", "baseline")
    stop, best = expected_stop(curve(root, "baseline"), 2, 0.15)
    assert 0 < stop < 600, "the test's curve should flatten before the cap"
    assert r["status"] == Status.COMPLETED and r["steps"] == stop and r["stopped_by"] == "early_stopping"
    assert r["early_stopping"] == {"metric": "valid_loss", "stopped": True, "best_step": best,
                                   "best": _logged(root, "baseline", best), "validations_since_best": 2}  # fmt: skip


def test_the_best_checkpoint_is_the_one_scored(sweep):
    _, root = sweep
    r = result(root / "stopping", "baseline")
    best = r["early_stopping"]["best_step"]
    assert best < r["steps"] and r["averaged_steps"] == [best]
    assert r["valid_loss"] == _logged(root, "baseline", best)  # validated again: the same weights


def test_average_around_the_best_is_the_checkpoints_up_to_it(sweep):
    _, root = sweep
    r = result(root / "stopping", "averaged")
    best = r["early_stopping"]["best_step"]
    assert r["averaged_steps"] == [best - 40, best - 20, best]
    assert r["steps"] == result(root / "stopping", "baseline")["steps"]  # selection does not change training


def test_a_run_that_reaches_its_cap_says_so(sweep):
    _, root = sweep
    r = result(root / "stopping", "capped")
    assert r["steps"] == 100 and r["stopped_by"] == "max_steps"
    assert r["early_stopping"]["stopped"] is False and "averaged_steps" not in r  # select: last, one checkpoint


def test_a_run_still_improving_at_its_cap_scores_its_last_step(sweep):
    _, root = sweep
    r = result(root / "stopping", "improving")
    assert r["steps"] == 100 and r["stopped_by"] == "max_steps" and r["early_stopping"]["stopped"] is False
    assert r["early_stopping"]["best_step"] == 100 and r["averaged_steps"] == [100]


def test_the_report_says_which_runs_stopped_and_where(sweep):
    _, root = sweep
    done = cli("report", str(root / "stopping"))
    assert done.returncode == 0, done.stderr
    rows = {r["run"]: r for r in csv.DictReader((root / "stopping" / "report" / "table.csv").open())}
    for run in ("baseline", "capped"):
        seeds = [
            json.loads(p.read_text()) for p in sorted((root / "stopping" / "runs" / run).glob("seed-*/result.json"))
        ]
        stopped = sum(r["early_stopping"]["stopped"] for r in seeds)
        assert rows[run]["stopped"] == f"{stopped}/{len(seeds)}"
        assert float(rows[run]["steps"]) == round(sum(r["steps"] for r in seeds) / len(seeds))
        best = [r["early_stopping"]["best_step"] for r in seeds]
        assert float(rows[run]["best step"]) == round(sum(best) / len(best))
    assert rows["capped"]["stopped"].startswith("0/") and float(rows["capped"]["steps"]) == 100
    page = (root / "stopping" / "report" / "index.html").read_text()  # the column's note is on the page (issue 76)
    assert "which is not convergence" in page


def test_budget_points_past_the_stop_are_not_there(sweep):
    _, root = sweep
    r = result(root / "stopping", "points")
    stop = r["steps"]
    assert 100 < stop < 600, "this test needs the run to stop between its first point and its end"
    assert [p["budget"] for p in r["budget_points"]] == [100]  # 600, the cap, was never reached
    assert not budget_dir(root / "stopping" / "runs" / "points" / "seed-1", 600).exists()


def test_kill_9_resumes_to_the_same_stop_and_scores(sweep, tmp_path):
    path, straight = sweep
    args = [str(path), "--only", "baseline", "--results", str(tmp_path), *ONE_THREAD]
    proc = start(*args)
    directory = tmp_path / "stopping" / "runs" / "baseline" / "seed-1"
    wait_for_checkpoint(directory, proc, 60, timeout=240)  # past the first validations, before the stop
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not (directory / "result.json").exists(), "the kill came after the run ended"
    resumed = cli("run", *args)
    assert resumed.returncode == 0, resumed.stderr
    killed, whole = result(tmp_path / "stopping", "baseline"), result(straight / "stopping", "baseline")
    assert killed["resumed_from_step"] >= 60
    for key in ("steps", "early_stopping", "averaged_steps", "valid_loss", "scores"):
        assert killed[key] == whole[key], key
    assert losses(tmp_path / "stopping", "baseline") == losses(straight / "stopping", "baseline")


def test_a_slurm_warning_checkpoints_and_the_requeued_worker_stops_the_same(sweep, tmp_path):
    """Slurm's warning (SIGUSR2) stops the worker with a checkpoint; the requeued job (`python -m ablate.worker
    RUN_DIR` again, as ablate's Slurm task runs it) resumes there and ends where the straight run ended."""
    path, straight = sweep
    proc = start(str(path), "--only", "baseline", "--results", str(tmp_path), *ONE_THREAD)
    directory = tmp_path / "stopping" / "runs" / "baseline" / "seed-1"
    wait_for_checkpoint(directory, proc, 60, timeout=240)
    found = subprocess.run(["pgrep", "-f", f"ablate.worker {directory}"], capture_output=True, text=True)
    os.kill(int(found.stdout.split()[0]), signal.SIGUSR2)
    proc.communicate(timeout=240)
    assert not (directory / "result.json").exists(), "the warning came after the run ended"
    requeued = subprocess.run([sys.executable, "-m", "ablate.worker", str(directory)], cwd=ROOT, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
    assert requeued.returncode == 0, requeued.stderr
    again, whole = result(tmp_path / "stopping", "baseline"), result(straight / "stopping", "baseline")
    assert again["resumed_from_step"] >= 60
    for key in ("steps", "early_stopping", "averaged_steps", "valid_loss", "scores"):
        assert again[key] == whole[key], key


def test_each_seed_stops_on_its_own_curve_and_a_finished_run_is_reused(sweep):
    path, root = sweep
    second = cli("run", str(path), "--only", "baseline", "--seeds", "2", "--results", str(root), *ONE_THREAD)
    assert second.returncode == 0, second.stderr
    r = json.loads((root / "stopping" / "runs" / "baseline" / "seed-2" / "result.json").read_text())
    points = [
        json.loads(line) for line in (root / "stopping" / "runs" / "baseline" / "seed-2" / "metrics.jsonl").open()
    ]
    validations = [(p["step"], p["valid_loss"]) for p in points if "valid_loss" in p and p["step"] > 0][:-1]
    stop = expected_stop(validations, 2, 0.15)
    assert (r["steps"], r["early_stopping"]["best_step"]) == (stop or (600, last_improvement(validations, 0.15)))
    again = plan(load_experiment(path), root, seeds=[1, 2], only=["baseline"]) + plan(load_experiment(path), root)
    assert {p.action for p in again} == {Action.SKIP}  # finished, early-stopped or capped: reused by its hash
    patience = "training.early_stopping={metric: valid_loss, patience: 3, min_delta: 0.15}"
    other = plan(load_experiment(path, [patience]), root, only=["baseline"])
    assert [p.action for p in other] == [Action.RERUN]  # another patience is another run


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (["training.early_stopping={patience: -1}"], "training.early_stopping.patience"),
        (["training.early_stopping={metric: bleu}"], "training.early_stopping.metric"),
        (["training.valid_bleu_pairs=0"], None),  # valid_loss needs no pairs: fine
        (["training.early_stopping={metric: valid_bleu, patience: 2}"], None),
        (["evaluation.select=best"], None),
        (["evaluation.select=newest"], "evaluation.select"),
        (["training.early_stopping={metric: valid_bleu}", "training.valid_bleu_pairs=0"], "valid_bleu_pairs"),
        (["training.early_stopping=null"], "evaluation.select: best needs training.early_stopping"),
        (["training.validate_every=30"], "multiple of training.checkpoint_every"),
    ],
)
def test_bad_or_contradicting_early_stopping_values_are_one_line_spec_errors(sweep, settings, says):
    path, _ = sweep
    if says is None:
        load_experiment(path, settings)
        return
    with pytest.raises(UserError) as error:
        load_experiment(path, settings)
    assert len(error.value.lines) == 1 and says in error.value.lines[0], error.value.lines


def test_a_bad_value_stops_ablate_run_in_one_line_before_training(sweep, tmp_path):
    path, _ = sweep
    run = cli("run", str(path), "--results", str(tmp_path), "--set", "training.early_stopping={patience: -1}")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "training.early_stopping.patience" in run.stderr
    assert not (tmp_path / "stopping").exists()


def test_the_watch_counts_patience_in_the_metrics_direction():
    loss = Watch("valid_loss", patience=2, min_delta=0.1)
    assert [loss.see(s, v) for s, v in [(1, 5.0), (2, 4.95), (3, 4.8), (4, 4.75)]] == [True, False, True, False]
    assert not loss.exhausted and loss.see(5, float("nan")) is False and loss.exhausted
    assert loss.best_step == 3
    bleu = Watch("valid_bleu", patience=1, min_delta=0.0)
    assert [bleu.see(s, v) for s, v in [(1, 10.0), (2, 12.0), (3, 12.0)]] == [True, True, False]
    assert bleu.exhausted and bleu.best == 12.0


def _logged(root, run, step):
    """The validation loss metrics.jsonl logged at `step` during training."""
    return dict(curve(root, run))[step]
