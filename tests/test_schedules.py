"""Learning-rate schedules against their formulas."""

import pytest

from ablate.train.schedules import SCHEDULE


def build(spec, d_model=512, progress=0.0):
    """The schedule as a function of the step alone, at a fixed fraction of the budget used."""
    schedule = SCHEDULE.build(SCHEDULE.parse(spec), d_model=d_model)
    return lambda step: schedule(step, progress)


def test_noam_is_the_papers_formula():
    noam = build({"name": "noam", "warmup": 4000})
    for step in [1, 100, 3999, 4000, 4001, 50_000]:
        assert noam(step) == pytest.approx(512**-0.5 * min(step**-0.5, step * 4000**-1.5))
    assert max(range(1, 10_000), key=noam) == 4000  # peak at the end of warmup
    assert build({"name": "noam", "warmup": 4000, "factor": 2.0})(10) == pytest.approx(2 * noam(10))


def test_inverse_sqrt_and_linear_warmup_and_constant():
    inv = build({"name": "inverse_sqrt", "lr": 1e-3, "warmup": 100})
    assert inv(50) == pytest.approx(5e-4) and inv(100) == pytest.approx(1e-3) and inv(400) == pytest.approx(5e-4)
    lin = build({"name": "linear_warmup", "lr": 1e-3, "warmup": 100})
    assert lin(50) == pytest.approx(5e-4) and lin(100) == lin(10_000) == pytest.approx(1e-3)
    const = build({"name": "constant", "lr": 2e-3})
    assert const(1) == const(10**6) == 2e-3


def test_linear_decay_reaches_final_at_the_end_of_the_budget_whatever_its_unit():
    spec = {"name": "linear_decay", "lr": 1e-3, "warmup": 10, "final": 0.1}
    assert build(spec)(5) == pytest.approx(5e-4)  # warming up
    assert build(spec, progress=0.0)(10) == pytest.approx(1e-3)
    assert build(spec, progress=0.5)(500) == pytest.approx(1e-3 * (1 - 0.9 * 0.5))
    assert build(spec, progress=1.0)(10_000) == pytest.approx(1e-4)
    assert build(spec, progress=1.3)(10_000) == pytest.approx(1e-4)  # past the budget: held at final
