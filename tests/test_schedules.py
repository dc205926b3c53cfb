"""Learning-rate schedules against their formulas."""

import pytest

from ablate.schedules import SCHEDULE


def build(spec, d_model=512):
    return SCHEDULE.build(SCHEDULE.parse(spec), d_model=d_model)


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
