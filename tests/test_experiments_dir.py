"""Every experiment file shipped under experiments/ validates and builds."""

import pytest

import ablate
from ablate.model.transformer import parameter_count
from tests.conftest import ROOT

FILES = sorted((ROOT / "experiments").rglob("*.yaml"))


def test_there_are_experiments():
    assert {"base.yaml", "pe.yaml", "norm.yaml", "heads.yaml", "scaling.yaml", "smoke.yaml"} <= {f.name for f in FILES}


@pytest.mark.parametrize("path", FILES, ids=[str(f.relative_to(ROOT)) for f in FILES])
def test_experiment_validates(path):
    experiment = ablate.load_experiment(path)
    assert (experiment.runs[0].arm or experiment.runs[0].name) == "baseline"  # the baseline, at a rate in a sweep
    for run in experiment.runs:
        vocab = run.spec.tokenizer.vocab_size
        assert parameter_count(run.spec.model, vocab, vocab) > 0
        if run.name != experiment.runs[0].name and experiment.name != "bench-aa":  # bench_aa's copies are its point
            assert run.differences, f"{run.name} does not differ from the baseline"
