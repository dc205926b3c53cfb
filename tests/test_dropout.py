"""bits16 dropout (model.dropout_sampler): the rate, independence and scaling of its masks, and its gradient."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ablate.model.spec import ModelSpec
from ablate.model.transformer import build_model
from ablate.parts.dropout import LEVELS, Bits16Dropout, keep_mask, use_sampler


def sigmas(observed: float, expected: float, n: int) -> float:
    """How many binomial standard deviations `observed` (a rate over n draws) lies from `expected`."""
    return abs(observed - expected) / math.sqrt(expected * (1 - expected) / n)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_16_bit_lane_drops_at_the_rate_p_rounded_to_a_65536th(p):
    torch.manual_seed(0)
    n = 1 << 22
    dropped = ~keep_mask(torch.Size([n]), p, torch.device("cpu"))
    rate = round(p * LEVELS) / LEVELS
    assert abs(rate - p) <= 0.5 / LEVELS
    for lane in range(4):  # the four quarters of each 64-bit draw, the sign bit's quarter included
        assert sigmas(dropped[lane::4].float().mean().item(), rate, n // 4) < 5


def test_neighbours_are_dropped_independently():
    """Two quarters of one draw, and the last of one draw and the first of the next: P(both) = p²."""
    torch.manual_seed(1)
    n, p = 1 << 22, 0.3
    dropped = ~keep_mask(torch.Size([n]), p, torch.device("cpu"))
    pairs = dropped.view(-1, 4)
    for a, b in [(0, 1), (1, 2), (2, 3), (0, 3)]:
        both = (pairs[:, a] & pairs[:, b]).float().mean().item()
        assert sigmas(both, p * p, n // 4) < 5
    across = (dropped[3:-1:4] & dropped[4::4]).float().mean().item()
    assert sigmas(across, p * p, n // 4 - 1) < 5


def test_dropout_keeps_the_expectation_and_masks_its_gradient_as_its_output():
    torch.manual_seed(2)
    drop = Bits16Dropout(0.1)
    x = (torch.rand(512, 1024) + 0.5).requires_grad_()  # never 0: a zero output means dropped
    y = drop(x)
    kept = y != 0
    scale = LEVELS / (LEVELS - round(0.1 * LEVELS))
    torch.testing.assert_close(y[kept], x[kept] * scale)
    upstream = torch.randn_like(y)
    y.backward(upstream)
    torch.testing.assert_close(x.grad, upstream * kept * scale)
    ones = drop(torch.ones(1 << 22))  # E[y] = x: the mean of 4M outputs within 5 standard errors of 1
    assert abs(ones.mean().item() - 1) < 5 * scale * math.sqrt(0.1 * 0.9 / (1 << 22))


def test_in_evaluation_or_at_p_0_it_is_the_identity_and_keeps_the_dtype():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    assert Bits16Dropout(0.0)(x) is x
    assert Bits16Dropout(0.3).eval()(x) is x
    assert Bits16Dropout(0.3)(x).dtype == torch.bfloat16


def test_the_spec_swaps_every_dropout_and_nothing_else():
    """bits16 changes which dropout runs, not the model: the same weights from one seed, the same eval outputs."""
    spec = dict(d_model=32, heads=2, d_ff=64, encoder_layers=2, decoder_layers=2, activation_dropout=0.2)
    models = {}
    for sampler in ("bernoulli", "bits16"):
        torch.manual_seed(3)
        models[sampler] = build_model(ModelSpec(**spec, dropout_sampler=sampler), 50, 50).eval()
    bernoulli, bits16 = models["bernoulli"], models["bits16"]
    kinds = [type(m) for m in bits16.modules() if isinstance(m, nn.Dropout)]
    assert kinds and set(kinds) == {Bits16Dropout}
    assert [m.p for m in bernoulli.modules() if isinstance(m, nn.Dropout)] == [
        m.p for m in bits16.modules() if isinstance(m, nn.Dropout)
    ]
    weights = zip(bernoulli.state_dict().values(), bits16.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in weights)
    src, tgt = torch.randint(3, 50, (3, 7)), torch.randint(3, 50, (3, 6))
    torch.testing.assert_close(bits16(src, tgt), bernoulli(src, tgt), rtol=0, atol=0)


def test_an_unknown_sampler_is_an_error():
    with pytest.raises(ValueError, match="philox"):
        use_sampler(nn.Sequential(nn.Dropout(0.1)), "philox")
