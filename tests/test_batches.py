"""Token-based batches: the budget holds, every pair is used once, the order follows the seed."""

from ablate.data.batches import batch_indices, collate
from ablate.data.tokenizer import PAD


def examples(n=500):
    return [([5] * (1 + i % 37) + [2], [1] + [6] * (1 + (i * 7) % 41) + [2]) for i in range(n)]


def test_budget_and_coverage():
    data = examples()
    batches = batch_indices(data, max_tokens=400, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(len(data)))
    for b in batches:
        longest = max(max(len(data[i][0]), len(data[i][1])) for i in b)
        assert longest * len(b) <= 400 or len(b) == 1


def test_order_follows_the_seed():
    data = examples()
    assert batch_indices(data, 400, seed=3) == batch_indices(data, 400, seed=3)
    assert batch_indices(data, 400, seed=3) != batch_indices(data, 400, seed=4)
    assert batch_indices(data, 400, seed=None) == batch_indices(data, 400, seed=None)


def test_collate_right_pads_and_counts():
    batch = collate([([7, 8, 2], [1, 9, 2]), ([7, 2], [1, 9, 9, 9, 2])])
    assert batch.src.tolist() == [[7, 8, 2], [7, 2, PAD]]
    assert batch.tgt.tolist() == [[1, 9, 2, PAD, PAD], [1, 9, 9, 9, 2]]
    assert (batch.src_tokens, batch.tgt_tokens) == (5, 6)
