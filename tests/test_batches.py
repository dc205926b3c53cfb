"""Token-based batches: the budget holds, every pair is used once, the order follows the seed; length buckets
(training.shape_buckets) bound the shapes and change no token's loss."""

import pytest
import torch

from ablate.data.batches import batch_indices, bucket, collate
from ablate.data.tokenizer import PAD
from tests.conftest import tiny_model


def examples(n=500):
    return [([5] * (1 + i % 37) + [2], [1] + [6] * (1 + (i * 7) % 41) + [2]) for i in range(n)]


def test_budget_and_coverage():
    data = examples()
    batches = batch_indices(data, max_tokens=400, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(len(data)))
    for b in batches:
        longest = max(max(len(data[i][0]), len(data[i][1])) for i in b)
        assert longest * len(b) <= 400 or len(b) == 1


def plan(*args, **kwargs) -> list[list[int]]:
    return [b.tolist() for b in batch_indices(*args, **kwargs)]


def test_order_follows_the_seed():
    data = examples()
    assert plan(data, 400, seed=3) == plan(data, 400, seed=3)
    assert plan(data, 400, seed=3) != plan(data, 400, seed=4)
    assert plan(data, 400, seed=None) == plan(data, 400, seed=None)


def test_collate_right_pads_and_counts():
    batch = collate([([7, 8, 2], [1, 9, 2]), ([7, 2], [1, 9, 9, 9, 2])])
    assert batch.src.tolist() == [[7, 8, 2], [7, 2, PAD]]
    assert batch.tgt.tolist() == [[1, 9, 2, PAD, PAD], [1, 9, 9, 9, 2]]
    assert batch.src.dtype == batch.tgt.dtype == torch.long  # embedding indices
    assert (batch.src_tokens, batch.tgt_tokens) == (5, 6)


def test_buckets_cut_batches_of_one_length_and_a_few_shapes():
    """shape_buckets: each batch is one bucket L (a multiple of the width), max_tokens // L pairs but the last of
    its bucket, padded to L (the target to L + 1); so an epoch has at most two shapes a bucket."""
    data, width, budget = examples(), 8, 400
    batches = batch_indices(data, budget, seed=3, width=width)
    assert sorted(i for b in batches for i in b) == list(range(len(data)))
    shapes, short = set(), {}
    for b in batches:
        lengths = {bucket(data[i], width) for i in b}
        assert len(lengths) == 1
        (length,) = lengths
        assert length % width == 0 and all(max(len(data[i][0]), len(data[i][1]) - 1) <= length for i in b)
        if len(b) != budget // length:
            assert len(b) < budget // length and length not in short  # one short batch a bucket
            short[length] = len(b)
        batch = collate([data[i] for i in b], width)
        assert batch.src.shape == (len(b), length) and batch.tgt.shape == (len(b), length + 1)
        shapes.add(tuple(batch.src.shape))
    assert len(shapes) <= 2 * len({bucket(e, width) for e in data})
    assert plan(data, budget, seed=3, width=width) != plan(data, budget, seed=4, width=width)


def test_a_bucket_pads_and_counts_only_real_tokens():
    batch = collate([([7, 8, 2], [1, 9, 2]), ([7, 2], [1, 9, 9, 9, 2])], width=8)
    assert batch.src.tolist() == [[7, 8, 2] + [PAD] * 5, [7, 2] + [PAD] * 6]
    assert batch.tgt.tolist() == [[1, 9, 2] + [PAD] * 6, [1, 9, 9, 9, 2] + [PAD] * 4]
    assert (batch.src_tokens, batch.tgt_tokens) == (5, 6)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rotary", "none"])
@pytest.mark.parametrize("placement", ["post_ln", "pre_ln"])
def test_padding_to_a_bucket_changes_no_tokens_loss(positions, placement):
    """The padding a bucket adds is masked: every target token's loss is what it is in the batch padded to its
    longest sentence (fp32, evaluation mode, every parameter randomised: biases and norm gains included)."""
    model = tiny_model(positions=positions, norm_placement=placement)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    g = torch.Generator().manual_seed(1)
    pairs = [([int(t) for t in torch.randint(3, 50, (n,), generator=g)] + [2],
              [1] + [int(t) for t in torch.randint(3, 50, (m,), generator=g)] + [2])
             for n, m in [(5, 9), (11, 4), (2, 2), (7, 13)]]  # fmt: skip
    plain, bucketed = collate(pairs), collate(pairs, width=16)
    assert bucketed.src.shape[1] > plain.src.shape[1] and bucketed.tgt.shape[1] > plain.tgt.shape[1]

    def token_losses(batch):
        with torch.no_grad():
            logits = model(batch.src, batch.tgt[:, :-1]).log_softmax(-1)
        labels = batch.tgt[:, 1:]
        losses = -logits.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
        return [losses[i, : len(pairs[i][1]) - 1] for i in range(len(pairs))]

    for a, b in zip(token_losses(plain), token_losses(bucketed), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_auto_buckets_follow_the_precision_never_the_device():
    """shape_buckets auto: 8 in bf16 (oneDNN builds a kernel a shape), none in fp32 (the padding would cost more
    than the shapes); a number is that width, null none. The width takes no device: the buckets are part of the
    run its config hash names (on an H200 auto once meant none, 13% more target tokens in 8,000 steps than the
    CPU's runs of the same hash)."""
    import inspect

    from ablate.train.spec import TrainingSpec

    auto = TrainingSpec(max_steps=1)
    assert list(inspect.signature(auto.bucket_width).parameters) == ["precision"]
    assert auto.shape_buckets == "auto" and auto.bucket_width("bf16") == 8 and auto.bucket_width("fp32") is None
    assert TrainingSpec(max_steps=1, shape_buckets=16).bucket_width("fp32") == 16
    assert TrainingSpec(max_steps=1, shape_buckets=None).bucket_width("bf16") is None
