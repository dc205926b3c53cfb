"""The training loop: accumulation is exact, checkpoints restore the trainer, schedules drive the lr."""

import random

import pytest
import torch

from ablate.data.batches import collate
from ablate.data.tokenizer import BOS, EOS
from ablate.model.transformer import build_model
from ablate.record import Validation
from ablate.train import checkpoints
from ablate.train.device import Placement
from ablate.train.spec import TrainingSpec
from ablate.train.trainer import Trainer
from tests.conftest import tiny_spec

V = 30


def examples(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        row = [rng.randrange(4, V) for _ in range(rng.randint(2, 9))]
        out.append(([*row, EOS], [BOS, *reversed(row), EOS]))
    return out


def trainer(device="cpu", dropout=0.0, **training):
    torch.manual_seed(0)
    model = build_model(tiny_spec(dropout=dropout), V, V).to(device)
    spec = TrainingSpec.model_validate(
        {"schedule": {"name": "constant", "lr": 1e-3}, "max_steps": 10, "precision": "fp32"} | training
    )  # fp32: these are exact checks of the loop; auto is bf16 on a CPU that computes it natively
    return Trainer(model, spec, 32, Placement.of(device, 0, "fp32", None))


def test_accumulated_batches_give_the_gradient_of_one_big_batch():
    data = examples(12)
    grads = []
    for batches in ([collate(data)], [collate(data[:5]), collate(data[5:])]):
        t = trainer()
        t.optimizer.step = lambda t=t: grads.append([p.grad.clone() for p in t.model.parameters()])
        t.train_step(batches)
    for g_one, g_two in zip(*grads, strict=True):
        torch.testing.assert_close(g_one, g_two, atol=1e-6, rtol=1e-4)


def test_batch_tokens_groups_batches_into_updates():
    data = examples(200)
    t = trainer(max_tokens=60, batch_tokens=150)
    updates = t.updates(data, epoch=0)
    assert sorted(i for update in updates for b in update for i in b) == list(range(200))
    assert all(len(update) > 1 for update in updates[:-1])
    for update in updates[:-1]:
        assert sum(len(data[i][1]) - 1 for b in update for i in b) >= 150


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
)
def test_checkpoint_restores_training_exactly(tmp_path, device):
    """With dropout, so the random state must come back too, and through the worker's loader, which maps every
    tensor to the run's device: the RNG states as well, which torch sets from CPU tensors only (on a GPU a
    resumed run failed, 'RNG state must be a torch.ByteTensor', until 2026-11-26)."""
    data = examples(300)
    straight = trainer(device, dropout=0.3, max_tokens=80, max_steps=12)
    straight.fit(data)

    first = trainer(device, dropout=0.3, max_tokens=80, max_steps=5)
    first.fit(data)
    torch.save(first.state_dict(), tmp_path / "last.pt")
    resumed = trainer(device, dropout=0.3, max_tokens=80, max_steps=12)
    torch.manual_seed(1)  # what a new process has: not the state of the first
    resumed.load_state_dict(checkpoints.load(tmp_path / "last.pt", torch.device(device)))
    assert (resumed.step, resumed.epoch, resumed.position) == (5, first.epoch, first.position)
    resumed.fit(data)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_schedule_sets_the_learning_rate_each_step():
    t = trainer(schedule={"name": "noam", "warmup": 4})
    seen = []
    t.fit(examples(100), on_step=lambda p: seen.append(p.lr))
    assert seen[:5] == [32**-0.5 * min(s**-0.5, s * 4**-1.5) for s in range(1, 6)]


def test_without_validate_every_a_run_validates_at_each_tenth_of_its_budget():
    steps = []
    trainer(max_steps=30, max_tokens=80).fit(examples(300), on_validate=steps.append)
    assert steps == [3, 6, 9, 12, 15, 18, 21, 24, 27]  # and the pipeline validates the end, 30

    steps = []
    trainer(max_steps=None, max_target_tokens=2000, max_tokens=80).fit(examples(300), on_validate=steps.append)
    assert len(steps) == 9 and steps == sorted(set(steps))  # tenths of the tokens: one validation each


def test_every_adam_kernel_makes_the_same_update():
    """training.adam_kernel changes how the update runs, not what it is. foreach is torch's default arithmetic
    element for element. Fused rounds otherwise, and Adam divides by the root of the squared gradient, so a
    weight whose gradient is near 0 can move by up to the learning rate either way: the losses agree to
    round-off over 8 steps (with weight decay, so AdamW), and all but a handful of weights to 1e-5."""
    data = [collate(examples(12, seed)) for seed in range(8)]
    losses, weights = {}, {}
    for kernel in ("default", "foreach", "fused"):
        t = trainer(adam_kernel=kernel, weight_decay=0.01, schedule={"name": "constant", "lr": 3e-3})
        losses[kernel] = [t.train_step([batch]) for batch in data]
        weights[kernel] = torch.cat([p.detach().flatten() for p in t.model.parameters()])
    assert torch.equal(weights["foreach"], weights["default"]) and losses["foreach"] == losses["default"]
    assert losses["fused"] == pytest.approx(losses["default"], rel=1e-5)
    assert losses["default"][-1] < losses["default"][0] - 0.3  # it learned: the updates were not all zero
    apart = (weights["fused"] - weights["default"]).abs() > 1e-5
    assert apart.float().mean() < 0.01


def epoch_ends(t, data, epochs):
    """The step at which each of the first `epochs` passes ends, from the trainer's own batching."""
    ends, step = [], 0
    for epoch in range(epochs):
        step += len(t.updates(data, epoch))
        ends.append(step)
    return ends


def test_validate_and_checkpoint_every_epoch_follow_the_passes_not_a_step_count():
    """`epoch` validates and checkpoints at the last update of every pass, however many updates a pass has
    (fairseq's default): the passes here differ in length, so no step count would hit them all."""
    data = examples(300)
    t = trainer(max_steps=70, max_tokens=60, batch_tokens=90, validate_every="epoch", checkpoint_every="epoch")
    ends = [e for e in epoch_ends(t, data, 20) if e <= 70]
    assert len({b - a for a, b in zip([0, *ends], ends, strict=False)}) > 1  # passes of different lengths
    validated, saved = [], []
    t.fit(data, on_validate=validated.append, on_checkpoint=saved.append)
    assert validated == ends and 70 not in ends  # the pipeline validates the end, mid-pass, itself
    assert saved == ends


def test_early_stopping_counts_patience_in_passes_when_validating_every_epoch():
    data = examples(300)
    t = trainer(max_steps=500, max_tokens=60, batch_tokens=90, validate_every="epoch",
                early_stopping={"metric": "valid_loss", "patience": 3})  # fmt: skip
    losses = iter([5.0, 4.0, 4.5, 3.0, 3.5, 3.2, 3.1, 1.0])
    validated = []
    outcome = t.fit(
        data, on_validate=lambda step: validated.append(step) or Validation(step=step, valid_loss=next(losses))
    )
    ends = epoch_ends(t, data, 7)
    assert validated == ends  # stopped at the third pass without a loss below the fourth's 3.0
    assert outcome.stopped_early and outcome.steps == ends[-1] and t.watch.best_step == ends[3]


def fit_logged(sync_every, device="cpu", **training):
    """fit with training.sync_every, validated and checkpointed on the way: what on_step logged, the trained
    weights, the outcome, and the steps each validation and checkpoint saw logged before it."""
    t = trainer(device, max_tokens=80, sync_every=sync_every, validate_every=6, checkpoint_every=4, **training)
    logged, seen = [], []
    outcome = t.fit(examples(300), logged.append, lambda step: seen.append(("valid", step, len(logged))) or {},
                    lambda step: seen.append(("checkpoint", step, len(logged))))  # fmt: skip
    return [(p.step, p.epoch, p.loss, p.lr, p.src_tokens) for p in logged], t, outcome, seen


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
)
def test_deferred_loss_reads_train_log_and_stop_as_reading_every_step(device, monkeypatch):
    """training.sync_every: losses kept on the device and read together every N steps give the same updates, the same
    log (each step's loss at its step), every validation and checkpoint after the steps before it are logged, and
    the same step of divergence; `auto` reads every step on a CPU."""
    from ablate.train.steps import Pending

    reads, read = [], Pending.read
    monkeypatch.setattr(Pending, "read", lambda self, *a: (len(self) and reads.append(len(self))) or read(self, *a))
    eager, t_eager, done_eager, seen_eager = fit_logged(1, device, max_steps=23)
    assert reads == [1] * 23
    reads.clear()
    deferred, t_deferred, done_deferred, seen_deferred = fit_logged(100, device, max_steps=23)
    assert reads[0] == 1 and max(reads) > 1 and sum(reads) == 23  # the first alone; then up to each validation
    assert len(eager) == 23 and deferred == eager and done_deferred == done_eager
    assert seen_deferred == seen_eager and all(logged == step for _, step, logged in seen_eager)
    for a, b in zip(t_eager.model.parameters(), t_deferred.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert t_deferred.totals.step_seconds > 0 and t_deferred.totals.timed_steps == 22
    blown = {"schedule": {"name": "constant", "lr": 50.0}, "diverge_loss": 4.0}  # diverges within a few steps
    eager, *_, diverged = fit_logged(1, device, max_steps=40, **blown)[:3]
    deferred, *_, diverged_too = fit_logged(100, device, max_steps=40, **blown)[:3]
    assert diverged.status == "diverged" and diverged_too == diverged and deferred == eager
    assert trainer(device).sync_every() == (1 if device == "cpu" else 25)


def test_a_hook_that_settles_sees_every_step_logged_and_a_pending_divergence_ends_the_run():
    """A budget point's hook (before_update) with reads deferred: it settles first, so what it saves and scores
    comes after every step is logged; a step that diverged while pending ends the run, diverged at that step, and
    the hook does nothing more."""
    t = trainer(max_tokens=80, sync_every=100, max_steps=23)
    logged, seen = [], []

    def look():
        if t.step in (7, 15):
            assert not t.settle()
            seen.append((t.step, len(logged)))
        return False

    outcome = t.fit(examples(300), logged.append, before_update=look)
    assert outcome.status == "completed" and len(logged) == 23 and seen == [(7, 7), (15, 15)]

    blown = {"max_tokens": 80, "max_steps": 40, "schedule": {"name": "constant", "lr": 0.3}, "diverge_loss": 8.0}
    eager = trainer(sync_every=1, **blown).fit(examples(300))  # 8.9 at step 4
    t = trainer(sync_every=100, **blown)
    acted = []

    def every_other():
        if t.step and t.step % 2 == 0 and not t.settle():
            acted.append(t.step)
        return False

    outcome = t.fit(examples(300), before_update=every_other)
    assert eager.status == "diverged" and outcome == eager
    assert acted and max(acted) < outcome.steps and outcome.steps > 2  # it looked, then met the divergence


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("clip_norm", [1e-3, 1e3])
@pytest.mark.parametrize("batches", [1, 2])
def test_clip_norm_hands_adam_the_gradient_torch_s_clip_grad_norm_makes(seed, clip_norm, batches):
    """training.clip_norm (fairseq's --clip-norm): Adam steps with torch's clip_grad_norm_ of the update's gradient:
    scaled down to the threshold's norm above it, untouched below it; once an update, after its batches' gradients
    are accumulated (each batch clipped alone would leave a norm other than the threshold)."""
    data = examples(12, seed=seed)
    grads = []
    for clip in (None, clip_norm):
        t = trainer(clip_norm=clip)  # the same initial weights, no dropout: the same gradient before clipping
        t.optimizer.step = lambda t=t: grads.append([p.grad.clone() for p in t.model.parameters()])
        t.train_step([collate(data[i::batches]) for i in range(batches)])
    raw, clipped = grads
    params = [torch.nn.Parameter(torch.empty_like(g)) for g in raw]
    for p, g in zip(params, raw, strict=True):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, clip_norm)  # by hand, as the trainer does
    for g, h in zip(clipped, (p.grad for p in params), strict=True):
        torch.testing.assert_close(g, h, atol=0, rtol=0)
    assert 1e-3 < norm < 1e3  # the two thresholds lie either side of the gradient's norm
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped]))
    if clip_norm < norm:
        torch.testing.assert_close(total, torch.tensor(clip_norm), rtol=1e-4, atol=0)
    else:
        assert all(torch.equal(g, h) for g, h in zip(clipped, raw, strict=True))
