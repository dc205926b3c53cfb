"""No tuning path selects on a test split: a learning-rate sweep's best rate (`ablate report --at best-lr`, the
sensitivity table) reads the validation loss alone. Each job here hides its test scores and hypotheses behind
an error, and the test BLEU, which the table reports at the chosen rate, would pick the other rate."""

from pathlib import Path

import pytest

from ablate.record import RunResult
from ablate.report.results import ExperimentResults, JobRecord
from ablate.report.sensitivity import arms, at_best_lr, best, sensitivity_frame


class SplitReadError(AssertionError):
    pass


class Sealed(JobRecord):
    """A job whose test split may not be read: its hypotheses raise."""

    def hypotheses(self, split: str):
        raise SplitReadError(f"read {split}")


def job(lr: float, valid_loss: float, test_bleu: float, seed: int) -> JobRecord:
    result = RunResult.model_validate({
        "experiment": "lr", "run": f"baseline,lr={lr:g}", "arm": "baseline", "seed": seed, "lr": lr,
        "status": "completed", "valid_loss": valid_loss, "init_valid_loss": 9.0,
        "scores": {"test_2016_flickr": {"bleu": test_bleu, "chrf": 50.0, "bleu_signature": "x", "chrf_signature": "x"}},
    })  # fmt: skip
    return Sealed(Path("."), result, {})


@pytest.fixture
def sweep():
    # validation prefers 1e-3 (loss 2.0); the test set would prefer 3e-3 (BLEU 40 against 30)
    runs = {f"baseline,lr={lr:g}": [job(lr, loss, bleu, s) for s in (1, 2)]
            for lr, loss, bleu in ((1e-3, 2.0, 30.0), (3e-3, 2.5, 40.0))}  # fmt: skip
    return ExperimentResults("lr", Path("."), runs)


def test_the_best_rate_is_the_lowest_validation_loss_and_reads_no_test_split(sweep):
    (points,) = arms(sweep).values()
    assert best(points).lr == 1e-3
    assert list(at_best_lr(sweep).runs) == ["baseline"] and at_best_lr(sweep).runs["baseline"][0].result.lr == 1e-3


def test_the_sensitivity_table_picks_by_validation(sweep):
    frame, notes = sensitivity_frame(sweep)
    assert frame.loc[0, "best lr"] == 1e-3 and frame.loc[0, "BLEU at best lr"] == 30.0  # reported, not selected on
    assert "chosen on validation" in notes[0]
