"""Feed-forward parts against their formulas (§3.3 and the variants)."""

import pytest
import torch
import torch.nn.functional as F

from ablate.parts.feedforward import FEEDFORWARD


def build(name):
    torch.manual_seed(0)
    return FEEDFORWARD.build(FEEDFORWARD.parse(name), d_model=8, d_ff=24, dropout=0.0)


@pytest.mark.parametrize("name, activation", [("relu", F.relu), ("gelu", F.gelu)])
def test_two_layer_ffn(name, activation):
    ffn = build(name)
    x = torch.randn(3, 8)
    expected = activation(x @ ffn.w_1.weight.T + ffn.w_1.bias) @ ffn.w_2.weight.T + ffn.w_2.bias
    torch.testing.assert_close(ffn(x), expected)


def test_swiglu_is_gated_silu_without_biases():
    ffn = build("swiglu")
    x = torch.randn(3, 8)
    gate = x @ ffn.w_1.weight.T
    expected = (gate * torch.sigmoid(gate) * (x @ ffn.v.weight.T)) @ ffn.w_2.weight.T
    torch.testing.assert_close(ffn(x), expected)
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 8 * 24
