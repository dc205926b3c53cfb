"""Norm types and placements against their formulas and PyTorch's functional norms."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ablate.parts.norms import NORM, NORM_PLACEMENT


def build_norm(name, d=16):
    return NORM.build(NORM.parse(name), d_model=d)


def test_layernorm_equals_functional():
    norm = build_norm("layernorm")
    x = 3 * torch.randn(4, 16) + 1
    torch.testing.assert_close(norm(x), F.layer_norm(x, (16,), eps=1e-5))


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


@pytest.mark.parametrize(
    "name, formula",
    [
        ("post_ln", lambda x, f, ln: ln(x + f(x))),  # Vaswani et al. §3.1: LayerNorm(x + Sublayer(x))
        ("pre_ln", lambda x, f, ln: x + f(ln(x))),  # Xiong et al. 2020
    ],
)
def test_placement_equals_its_formula(name, formula):
    norm = build_norm("layernorm")
    connection = NORM_PLACEMENT.build(NORM_PLACEMENT.parse(name), norm=norm, dropout=0.0)
    x = torch.randn(3, 16)
    torch.testing.assert_close(connection(x, Double()), formula(x, Double(), norm))


def test_only_pre_ln_ends_stacks_with_a_norm():
    assert NORM_PLACEMENT["pre_ln"].final_norm
    assert not NORM_PLACEMENT["post_ln"].final_norm
