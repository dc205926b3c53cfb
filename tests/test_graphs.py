"""training.cuda_graphs: the update replayed as CUDA graphs trains as the eager update does; a CPU never captures."""

import math

import pytest
import torch

from ablate.model.transformer import build_model
from ablate.rundir import config_hash
from ablate.train.device import Placement
from ablate.train.graphs import wanted
from ablate.train.spec import TrainingSpec
from ablate.train.trainer import Trainer
from tests.conftest import tiny_spec
from tests.test_training import V, examples

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")


def graphed(device, graphs="auto", dropout=0.1, **training):
    """A bf16 trainer of bucketed batches (the shapes graphs need) on `device`, the same weights whatever `graphs`."""
    torch.manual_seed(0)
    model = build_model(tiny_spec(dropout=dropout), V, V).to(device)
    spec = TrainingSpec.model_validate({"schedule": {"name": "constant", "lr": 1e-3}, "max_steps": 50,
                                        "max_tokens": 80, "precision": "bf16", "shape_buckets": 4,
                                        "cuda_graphs": graphs, "clip_norm": 1.0} | training)  # fmt: skip
    return Trainer(model, spec, 32, Placement.of(device.type, 0, "bf16", None))


def test_auto_captures_on_cuda_alone_with_buckets_and_never_on_a_cpu():
    assert wanted("auto", CUDA, 8, 1)
    assert not wanted("auto", CPU, 8, 1)  # the CPU path is the eager step, unchanged
    assert not wanted("auto", CUDA, None, 1)  # a shape a batch: nothing to replay
    assert not wanted("auto", CUDA, 8, 2)  # DDP's all-reduce stays eager
    assert not wanted(False, CUDA, 8, 1) and wanted(True, CUDA, None, 1)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        wanted(True, CPU, 8, 1)
    with pytest.raises(ValueError, match="one process"):
        wanted(True, CUDA, 8, 2)


def test_a_cpu_trainer_is_the_eager_one_and_the_key_does_not_change_a_runs_hash():
    t = graphed(CPU)
    assert t.graphs is None and t.lr is None
    assert not t.optimizer.param_groups[0]["capturable"] and isinstance(t.optimizer.param_groups[0]["lr"], float)
    losses = [t.train_step([b]) for b in batches(t, 3)]
    assert all(math.isfinite(loss) for loss in losses) and t.last_lr == 1e-3
    spec = {"model": {}, "training": {"max_steps": 10}}
    assert config_hash(spec) == config_hash(spec | {"training": {"max_steps": 10, "cuda_graphs": False}})


def batches(t, n):
    from ablate.data.batches import collate

    data = examples(400)
    return [collate([data[i] for i in update[0]], t.width) for update in t.updates(data, 0)[:n]]


def fit_losses(t, steps=50):
    """`t` fitted for `steps` steps, its dropout drawn from a generator seeded here: two trainers fitted one after
    the other draw the same masks (seeded once, the second would draw from where the first stopped)."""
    torch.manual_seed(1)
    logged = []
    outcome = t.fit(examples(400), logged.append)
    assert outcome.steps == steps
    return [p.loss for p in logged]


@needs_cuda
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_captured_steps_have_eager_losses_over_50_steps(dropout):
    """Dropout too: a graph's draws come from the generator at the offsets eager's would."""
    eager, captured = graphed(CUDA, False, dropout), graphed(CUDA, True, dropout)
    eager_losses, captured_losses = fit_losses(eager), fit_losses(captured)
    assert eager.graphs is None and captured.graphs is not None
    shapes = {(tuple(b.src.shape), tuple(b.tgt.shape)) for b in batches(captured, 50)}
    assert len(captured.graphs) >= 2 and len(captured.graphs) <= len(shapes) + 1
    torch.testing.assert_close(torch.tensor(captured_losses), torch.tensor(eager_losses), rtol=2e-2, atol=2e-2)
    assert max(captured_losses[-5:]) < captured_losses[0] - 0.1  # it learns, not merely stays put
    for a, b in zip(eager.model.parameters(), captured.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)


@needs_cuda
def test_an_eager_checkpoint_resumes_under_graphs():
    eager = graphed(CUDA, False, max_steps=10)
    fit_losses(eager, 10)
    resumed = graphed(CUDA, True, max_steps=20)
    resumed.load_state_dict(eager.state_dict())
    assert resumed.optimizer.param_groups[0]["capturable"]
    losses = fit_losses(resumed, 20)
    assert len(losses) == 10 and all(math.isfinite(x) for x in losses) and len(resumed.graphs) >= 1
