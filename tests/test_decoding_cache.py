"""Incremental decoding with the cache gives what full recomputation gives, for every positions part."""

import pytest
import torch

from ablate.registry import REGISTRY
from tests.conftest import randomised, tiny_model


@pytest.mark.parametrize("positions", list(REGISTRY["positions"].parts))
@pytest.mark.parametrize("placement", list(REGISTRY["norm_placement"].parts))
def test_cached_decoding_equals_full_recomputation(positions, placement):
    model = tiny_model(positions=positions, norm_placement=placement, scaling="qk_norm")
    torch.manual_seed(2)
    src = torch.randint(1, 50, (3, 9))
    src[2, 5:] = 0  # padding
    tgt = torch.randint(1, 50, (3, 8))
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        full = model.decode(tgt, memory, src_mask)

        cache = model.new_cache()
        steps = [model.decode(tgt[:, :3], memory, src_mask, cache)]  # a block first: the offset mask path
        for t in range(3, tgt.size(1)):
            steps.append(model.decode(tgt[:, t : t + 1], memory, src_mask, cache))
        assert len(cache) == tgt.size(1)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_cached_decoding_with_values_wider_than_keys_equals_full_recomputation():
    """d_v apart from d_k (Table 3 row B): the cache keeps keys d_k wide and values d_v wide."""
    model = randomised(tiny_model(d_k=4, d_v=12))
    torch.manual_seed(2)
    src, tgt = torch.randint(1, 50, (2, 7)), torch.randint(1, 50, (2, 6))
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache) for t in range(tgt.size(1))]
    (self_kv, cross_kv) = cache.layers[0]
    assert (self_kv.k.size(-1), self_kv.v.size(-1), cross_kv.k.size(-1), cross_kv.v.size(-1)) == (4, 12, 4, 12)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)


def test_cross_attention_memory_is_computed_once():
    model = tiny_model()
    src, tgt = torch.randint(1, 50, (2, 5)), torch.randint(1, 50, (2, 4))
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        model.decode(tgt[:, :1], memory, src_mask, cache)
        first = [cross.k for _, cross in cache.layers]
        model.decode(tgt[:, 1:2], memory, src_mask, cache)
    assert all(cross.k is k for (_, cross), k in zip(cache.layers, first, strict=True))
    assert all(len(self_kv) == 2 for self_kv, _ in cache.layers)


def test_reorder_keeps_the_chosen_rows():
    model = tiny_model()
    src, tgt = torch.randint(1, 50, (3, 5)), torch.randint(1, 50, (3, 4))
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        model.decode(tgt[:, :2], memory, src_mask, cache)
        index = torch.tensor([2, 2, 0])
        cache.reorder(index)
        step = model.decode(tgt[index, 2:3], memory[index], src_mask[index], cache)
        full = model.decode(tgt[index, :3], memory[index], src_mask[index])
    torch.testing.assert_close(step[:, 0], full[:, 2], atol=1e-5, rtol=1e-5)
