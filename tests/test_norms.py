"""Norm types and placements against their formulas and PyTorch's functional norms."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ablate.parts.norms import NORM, NORM_PLACEMENT
from tests.conftest import randomised


def build_norm(name, d=16):
    return NORM.build(NORM.parse(name), d_model=d)


def layer_norm_by_hand(x, gain, bias, eps=1e-5):
    """(x − mean) / √(var + eps) · gain + bias, the variance biased (over the last dimension), as Ba et al."""
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt((x - mean).pow(2).mean(-1, keepdim=True) + eps) * gain + bias


def test_layernorm_equals_the_formula_with_its_gain_and_bias():
    norm = randomised(build_norm({"name": "layernorm", "eps": 1e-3}))
    x = 3 * torch.randn(4, 16) + 1
    gain, bias = norm.norm.weight.detach(), norm.norm.bias.detach()
    assert not torch.allclose(gain, torch.ones(16)) and not torch.allclose(bias, torch.zeros(16))
    with torch.no_grad():
        torch.testing.assert_close(norm(x), layer_norm_by_hand(x, gain, bias, eps=1e-3))
        torch.testing.assert_close(norm(x), F.layer_norm(x, (16,), gain, bias, eps=1e-3))


def test_rmsnorm_equals_formula():
    norm = build_norm({"name": "rmsnorm", "eps": 1e-6})
    with torch.no_grad():
        norm.norm.weight.copy_(torch.linspace(0.5, 2.0, 16))
    x = 3 * torch.randn(4, 16) + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.norm.weight
    torch.testing.assert_close(norm(x), expected)
    assert not any("bias" in n for n, _ in norm.named_parameters())


class Double(nn.Module):
    def forward(self, x):
        return 2 * x + 1


P = 0.3
PLACEMENTS = {  # (x, sublayer f, norm, dropout) -> the layer's output
    "post_ln": lambda x, f, ln, drop: ln(x + drop(f(x))),  # Vaswani et al. §3.1, §5.4: LN(x + Dropout(Sublayer(x)))
    "pre_ln": lambda x, f, ln, drop: x + drop(f(ln(x))),  # Xiong et al. 2020: x + Dropout(Sublayer(LN(x)))
    "post_ln_dropout_after_norm": lambda x, f, ln, drop: drop(ln(x + f(x))),  # the tutorial bug
}


@pytest.mark.parametrize("name", PLACEMENTS)
def test_placement_equals_its_formula_with_dropout_where_it_says(name):
    """In training, with the norm's gain and bias randomised, the same dropout mask (the same RNG state) drawn where
    the formula says; the other placements give other numbers. In evaluation, no dropout."""
    norm = randomised(build_norm("layernorm"))
    connection = NORM_PLACEMENT.build(NORM_PLACEMENT.parse(name), norm=norm, dropout=P).train()
    gain, bias = norm.norm.weight.detach(), norm.norm.bias.detach()

    def ln(x):
        return layer_norm_by_hand(x, gain, bias)

    def drop(x):
        return F.dropout(x, P, training=True)

    x = torch.randn(3, 16)
    with torch.no_grad():
        torch.manual_seed(5)
        got = connection(x, Double())
        torch.manual_seed(5)
        torch.testing.assert_close(got, PLACEMENTS[name](x, Double(), ln, drop))
        for other, formula in PLACEMENTS.items():
            if other != name:
                torch.manual_seed(5)
                assert not torch.allclose(got, formula(x, Double(), ln, drop), atol=1e-3), other
        connection.eval()
        torch.testing.assert_close(connection(x, Double()), PLACEMENTS[name](x, Double(), ln, lambda y: y))


def test_only_pre_ln_ends_stacks_with_a_norm():
    assert NORM_PLACEMENT["pre_ln"].final_norm
    assert not NORM_PLACEMENT["post_ln"].final_norm
