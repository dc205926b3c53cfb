"""The chunked label-smoothed cross-entropy (training.cross_entropy chunked) against torch's and the formula."""

from __future__ import annotations

import pytest
import torch

from ablate.train.loss import CHUNK, MIN_CHUNK_LOGITS, chunk_rows, smoothed_cross_entropy_sum

PAD = 0


def logits_and_labels(n: int, vocabulary: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(n, vocabulary, generator=g)).to(dtype).requires_grad_()
    labels = torch.randint(1, vocabulary, (n,), generator=g)
    labels[torch.randperm(n, generator=g)[: n // 5]] = PAD  # a fifth of the rows are padding
    return logits, labels


def formula(logits: torch.Tensor, labels: torch.Tensor, epsilon: float) -> torch.Tensor:
    """§5.4 as a distribution: q = (1 − ε)·onehot + ε/V, the loss −Σ q·log softmax, summed over real rows."""
    log_p = torch.log_softmax(logits.double(), dim=-1)
    q = torch.full_like(log_p, epsilon / logits.shape[1])
    q[torch.arange(len(labels)), labels] += 1 - epsilon
    return -((q * log_p).sum(-1) * (labels != PAD)).sum()


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("vocabulary", [97, 5000])  # chunks of 2,702 rows and of 64
@pytest.mark.parametrize("rows", ["one", "a chunk", "three chunks and a part"])
def test_chunked_equals_the_formula_and_torch_in_fp32(epsilon, vocabulary, rows):
    chunk = chunk_rows(vocabulary)
    n = {"one": 1, "a chunk": chunk, "three chunks and a part": 3 * chunk + 17}[rows]
    logits, labels = logits_and_labels(n, vocabulary, torch.float32)
    chunked = smoothed_cross_entropy_sum(logits, labels, epsilon, PAD, "chunked")
    (grad_chunked,) = torch.autograd.grad(chunked, logits)
    expected = formula(logits, labels, epsilon)
    (grad_expected,) = torch.autograd.grad(expected, logits)
    torch_loss = smoothed_cross_entropy_sum(logits, labels, epsilon, PAD, "torch")
    (grad_torch,) = torch.autograd.grad(torch_loss, logits)
    torch.testing.assert_close(chunked.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grad_chunked, grad_expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(chunked, torch_loss, rtol=1e-5, atol=1e-4)
    # torch's fp32 backward is itself up to 1e-5 off the exact gradient at 5,000 words (the chunked one 4e-7)
    torch.testing.assert_close(grad_chunked, grad_torch, rtol=1e-5, atol=2e-5)
    if (labels == PAD).any():
        assert grad_chunked[labels == PAD].abs().max() == 0


def test_chunked_in_bf16_is_torchs_loss_to_round_off_and_returns_a_bf16_gradient():
    logits, labels = logits_and_labels(2 * CHUNK + 5, 1000, torch.bfloat16, seed=3)
    chunked = smoothed_cross_entropy_sum(logits, labels, 0.1, PAD, "chunked")
    (grad,) = torch.autograd.grad(3.0 * chunked, logits)  # an upstream gradient other than 1 is carried
    expected = 3.0 * formula(logits, labels, 0.1)
    (grad_expected,) = torch.autograd.grad(expected, logits)
    assert chunked.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(3.0 * chunked.double(), expected, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(grad.float(), grad_expected.float(), rtol=1e-2, atol=1e-3)  # bf16: 8 bits


def test_a_chunk_is_64_rows_from_4096_words_on_and_no_fewer_logits_below():
    """The committed runs (6,000 and 10,000 words) were trained with 64 rows a chunk; a small vocabulary gets
    chunks of as many rows as hold MIN_CHUNK_LOGITS logits."""
    assert [chunk_rows(v) for v in (4096, 6000, 10000, 37000)] == [CHUNK] * 4
    for vocabulary in (2, 97, 500, 1000, 4000):
        rows = chunk_rows(vocabulary)
        assert rows > CHUNK and rows * vocabulary <= MIN_CHUNK_LOGITS < (rows + 1) * vocabulary


def test_the_backward_leaves_the_logits_as_they_were():
    logits, labels = logits_and_labels(CHUNK + 3, 50, torch.float32)
    before = logits.detach().clone()
    smoothed_cross_entropy_sum(logits, labels, 0.1, PAD, "chunked").backward()
    assert torch.equal(logits.detach(), before)


def test_an_unknown_kernel_is_an_error():
    logits, labels = logits_and_labels(4, 10, torch.float32)
    with pytest.raises(ValueError, match="fused"):
        smoothed_cross_entropy_sum(logits, labels, 0.1, PAD, "fused")


def test_training_with_the_chunked_loss_follows_torchs():
    """The same model trained 30 steps with either kernel from one seed: the same losses to round-off."""
    from ablate.data.batches import Batch
    from ablate.model.spec import ModelSpec
    from ablate.model.transformer import build_model
    from ablate.train.spec import TrainingSpec
    from ablate.train.trainer import Trainer

    g = torch.Generator().manual_seed(5)
    src, tgt = torch.randint(3, 40, (8, 9), generator=g), torch.randint(3, 40, (8, 8), generator=g)
    src[:, -2:], tgt[:, -3:] = PAD, PAD
    batch = Batch(src, tgt, int((src != PAD).sum()), int((tgt[:, 1:] != PAD).sum()))
    losses = {}
    for kernel in ("torch", "chunked"):
        torch.manual_seed(1)
        model = build_model(ModelSpec(d_model=32, heads=2, d_ff=64, encoder_layers=1, decoder_layers=1), 40, 40)
        spec = TrainingSpec.model_validate(
            {
                "max_steps": 30,
                "cross_entropy": kernel,
                "precision": "fp32",
                "schedule": {"name": "inverse_sqrt", "lr": 0.01, "warmup": 5},
            }
        )
        trainer = Trainer(model, spec, 32)
        torch.manual_seed(2)
        losses[kernel] = [trainer.train_step([batch]) for _ in range(30)]
    assert losses["torch"][-1] < 0.8 * losses["torch"][0]  # it learns
    torch.testing.assert_close(losses["chunked"], losses["torch"], rtol=1e-4, atol=1e-5)
