"""Each positions part does what its name says."""

import math

import pytest
import torch

from ablate.parts.positions import POSITIONS
from ablate.registry import PartSpec
from tests.conftest import tiny_model


def build(name, d_model=16, **params):
    return POSITIONS.build(POSITIONS.parse({"name": name, **params}), d_model=d_model)


@pytest.mark.parametrize("d_model", [16, 17])
def test_sinusoidal_equals_the_papers_formula(d_model):
    positions = build("sinusoidal", d_model)
    length = 2000  # longer than the table it starts with
    got = positions(torch.zeros(1, length, d_model))[0]
    for pos in [0, 1, 7, 999, 1999]:
        for i in range(d_model):
            angle = pos / 10000 ** ((i - i % 2) / d_model)  # PE(pos, 2i) = sin(pos / 10000^(2i/d_model))
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert got[pos, i].item() == pytest.approx(expected, abs=2e-4), (pos, i)


def test_sinusoidal_is_fixed_and_offset_aware():
    positions = build("sinusoidal")
    assert list(positions.parameters()) == []
    x = torch.randn(2, 10, 16)
    torch.testing.assert_close(positions(x[:, 6:], offset=6), positions(x)[:, 6:])


def test_learned_adds_its_table_and_refuses_longer_sequences():
    positions = build("learned", max_len=8)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(positions(x, offset=2), x + positions.embedding.weight[2:7])
    with pytest.raises(ValueError, match="length 9 is longer than max_len=8"):
        positions(torch.zeros(1, 9, 16))


def test_none_changes_nothing():
    positions = build("none")
    x = torch.randn(2, 5, 16)
    assert torch.equal(positions(x), x)
    assert torch.equal(positions.rotate(x[:, None]), x[:, None])


def test_rotary_leaves_embeddings_and_rotates_queries_keys_by_relative_position():
    positions = build("rotary")
    x = torch.randn(2, 5, 16)
    assert torch.equal(positions(x), x)  # nothing added to the embeddings
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m, n):
        return (positions.rotate(q, m) * positions.rotate(k, n)).sum().item()

    assert score(3, 1) == pytest.approx(score(13, 11), abs=1e-4)  # depends on m - n alone
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)
    assert positions.rotate(q, 5).norm().item() == pytest.approx(q.norm().item(), rel=1e-5)  # a rotation
    # the pair (x0, x1) at position 1 turns by angle 1 * base^0 = 1 radian
    unit = torch.zeros(1, 1, 1, 8)
    unit[..., 0] = 1.0
    turned = positions.rotate(unit, 1)[0, 0, 0]
    assert turned[0].item() == pytest.approx(math.cos(1.0), abs=1e-6)
    assert turned[1].item() == pytest.approx(math.sin(1.0), abs=1e-6)


def test_rotary_acts_only_in_self_attention():
    model = tiny_model(positions="rotary")
    for layer in model.decoder.layers:
        assert layer.self_attn.positions is model.tgt_positions
        assert not hasattr(layer.cross_attn, "positions")


def test_part_spec_forms():
    assert POSITIONS.parse("learned") == PartSpec("positions", "learned", POSITIONS["learned"].Params(max_len=1024))
    assert str(POSITIONS.parse({"name": "learned", "max_len": 64})) == "learned(max_len=64)"
    assert POSITIONS.parse({"name": "learned", "max_len": 64}).dump() == {"name": "learned", "max_len": 64}
