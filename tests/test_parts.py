"""Every registered part, in every slot, through the same checks: shapes, gradients, masks."""

import pytest
import torch
import torch.nn.functional as F

from ablate.model.spec import PART_FIELDS
from ablate.registry import REGISTRY
from tests.conftest import tiny_model

ALL_PARTS = [(slot, name) for slot in PART_FIELDS for name in REGISTRY[slot].parts]
V = 50


@pytest.fixture(params=ALL_PARTS, ids=[f"{s}={p}" for s, p in ALL_PARTS])
def model(request):
    slot, name = request.param
    return tiny_model(V, **{slot: name})


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (3, 7), generator=g)
    tgt = torch.randint(4, V, (3, 6), generator=g)
    src[1, 4:] = 0  # right padding, as the batcher makes it
    tgt[2, 3:] = 0
    return src, tgt


def test_output_shapes(model):
    src, tgt = batch()
    memory, src_mask = model.encode(src)
    assert memory.shape == (3, 7, 32)
    assert src_mask.shape == (3, 1, 1, 7)
    assert model(src, tgt).shape == (3, 6, V)


def test_gradients_reach_every_parameter(model):
    model.train()
    src, tgt = batch()
    logits = model(src, tgt[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} gets no gradient"
        assert p.grad.abs().sum() > 0, f"{name} gets a zero gradient"


def test_causal_mask_respected(model):
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1) % V + 1  # only position 4 changes
    with torch.no_grad():
        before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(before[:, :4], after[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(before[:, 4:], after[:, 4:])


def test_source_padding_respected(model):
    """Padding a sentence, or changing what the padded positions hold, changes none of its real outputs."""
    src, tgt = batch()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        alone, _ = model.encode(src[1:2, :4])  # sentence 1 without its padding
        torch.testing.assert_close(memory[1, :4], alone[0], atol=1e-5, rtol=1e-5)

        x = model.src_positions(model.embedding_scale(model.embeddings.source(src)))
        noisy = x.clone()
        noisy[1, 4:] += 100.0 * torch.randn_like(noisy[1, 4:])
        torch.testing.assert_close(
            model.encoder(noisy, src_mask)[1, :4], model.encoder(x, src_mask)[1, :4], atol=1e-5, rtol=1e-5
        )

        logits = model(src, tgt)
        single = model(src[1:2, :4], tgt[1:2])
    torch.testing.assert_close(logits[1], single[0], atol=1e-5, rtol=1e-5)


def test_target_padding_respected(model):
    src, tgt = batch()
    with torch.no_grad():
        padded = model(src[2:3], tgt[2:3])  # three tokens, then padding
        unpadded = model(src[2:3], tgt[2:3, :3])
    torch.testing.assert_close(padded[0, :3], unpadded[0], atol=1e-5, rtol=1e-5)
