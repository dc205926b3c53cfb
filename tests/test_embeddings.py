"""Embedding scale and tying parts: which matrices are shared, and what multiplies the embeddings."""

import math

import pytest
import torch

from ablate.model.transformer import build_model
from ablate.parts.embeddings import EMBEDDING_SCALE
from tests.conftest import tiny_spec


def test_sqrt_dmodel_scales_and_none_does_not():
    x = torch.randn(2, 3, 16)
    scale = EMBEDDING_SCALE.build(EMBEDDING_SCALE.parse("sqrt_dmodel"), d_model=16)
    torch.testing.assert_close(scale(x), x * math.sqrt(16))
    assert torch.equal(EMBEDDING_SCALE.build(EMBEDDING_SCALE.parse("none"), d_model=16)(x), x)


@pytest.mark.parametrize(
    "tying, src_is_tgt, tgt_is_out", [("none", False, False), ("decoder", False, True), ("all", True, True)]
)
def test_tying_shares_exactly_the_named_matrices(tying, src_is_tgt, tgt_is_out):
    e = build_model(tiny_spec(tying=tying), 40, 40).embeddings
    assert (e.source.weight is e.target.weight) == src_is_tgt
    assert (e.target.weight is e.output.weight) == tgt_is_out
    assert (e.source.weight is e.output.weight) == (src_is_tgt and tgt_is_out)


def test_tying_all_needs_one_vocabulary():
    with pytest.raises(ValueError, match="joint vocabulary"):
        build_model(tiny_spec(tying="all"), 40, 41)


def test_generator_uses_the_tied_matrix():
    model = build_model(tiny_spec(tying="decoder"), 40, 30).eval()
    hidden = torch.randn(2, 3, 32)
    torch.testing.assert_close(model.generator(hidden), hidden @ model.embeddings.target.weight.T)
