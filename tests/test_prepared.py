"""A prepared corpus (ablate.data.prepared): the token ids and batches of the in-memory path it replaced, bit for bit;
whole or absent after a kill; a damaged file found and prepared again; one preparation for two processes."""

import random

import pytest

import ablate
from ablate.data.batches import batch_indices, bucket, lengths
from ablate.data.corpus import CORPUS, data_dir
from ablate.data.dataset import load_dataset
from ablate.data.prepared import TokenPairs
from ablate.data.tokenizer import BOS, EOS, Vocabulary
from ablate.train.trainer import updates_of
from tests.conftest import ROOT

# -- the in-memory path as it was before the prepared corpus (ablate 0.x up to issue 75), written out ---------------


def reference_train(data, tokenizer):
    """Training examples as the in-memory path made them: read, vocabulary learned from every pair, encoded, filtered."""
    corpus = CORPUS.build(data.corpus, root=data_dir(data.data_dir))
    pairs = corpus.read(data.train, data.source, data.target)
    pairs = pairs[: data.max_pairs] if data.max_pairs else pairs
    vocab = Vocabulary.train((text for pair in pairs for text in pair), tokenizer.vocab_size, tokenizer.min_frequency)
    if data.max_train_length is not None:
        pairs = [(s, t) for s, t in pairs if len(s.split()) <= data.max_train_length]
    src = [e.ids for e in vocab.tokenizer.encode_batch([p[0] for p in pairs])]
    tgt = [e.ids for e in vocab.tokenizer.encode_batch([p[1] for p in pairs])]
    encoded = [([*s, EOS], [BOS, *t, EOS]) for s, t in zip(src, tgt, strict=True)]
    return vocab, [e for e in encoded if max(len(e[0]), len(e[1]) - 1) <= data.max_len]


def reference_batches(examples, max_tokens, seed, width=None):
    """batch_indices as it was, on lists of Python ints."""
    rng = random.Random(seed)
    if width is not None:
        buckets = {}
        for i, example in enumerate(examples):
            buckets.setdefault(bucket(example, width), []).append(i)
        batches = []
        for length, members in sorted(buckets.items()):
            if seed is not None:
                rng.shuffle(members)
            rows = max(1, max_tokens // length)
            batches += [members[k : k + rows] for k in range(0, len(members), rows)]
        if seed is not None:
            rng.shuffle(batches)
        return batches
    order = list(range(len(examples)))
    if seed is not None:
        rng.shuffle(order)
    order.sort(key=lambda i: (len(examples[i][0]), len(examples[i][1])))
    batches, current, longest = [], [], 0
    for i in order:
        length = max(len(examples[i][0]), len(examples[i][1]))
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    if seed is not None:
        rng.shuffle(batches)
    return batches


def reference_updates(examples, spec, epoch, width):
    batches = reference_batches(examples, spec.max_tokens, spec.seed * 100_003 + epoch, width)
    if spec.batch_tokens is None:
        return [[b] for b in batches]
    updates, current, tokens = [], [], 0
    for b in batches:
        current.append(b)
        tokens += sum(len(examples[i][1]) - 1 for i in b)
        if tokens >= spec.batch_tokens:
            updates.append(current)
            current, tokens = [], 0
    return updates + ([current] if current else [])


COMMITTED = ["experiments/smoke.yaml", "experiments/base.yaml", "experiments/converged.yaml",
             "experiments/paper/transformer_tiny.yaml", "experiments/length.yaml"]  # fmt: skip


@pytest.mark.parametrize("path", COMMITTED)
def test_the_prepared_corpus_gives_todays_ids_and_batches(path):
    """Every committed spec's training pairs, vocabulary and first two epochs' updates, at each bucket width its
    precisions give, are what the in-memory path gave: committed runs stay reproducible, and a run resumed across
    the change continues as it would have."""
    spec = ablate.load_experiment(ROOT / path).baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)
    vocab, expected = reference_train(spec.data, spec.tokenizer)
    assert data.src_vocab.tokenizer.to_str() == vocab.tokenizer.to_str()
    assert isinstance(data.train, TokenPairs)
    assert len(data.train) == len(expected)
    assert [data.train[i] for i in range(len(expected))] == expected
    assert [tuple(a.tolist()) for a in lengths(data.train)] == [tuple(a.tolist()) for a in lengths(expected)]
    widths = {spec.training.bucket_width(p) for p in ("fp32", "bf16")}
    for width in sorted(widths, key=str):
        for epoch in (0, 1):
            got = updates_of(data.train, spec.training, epoch, width)
            assert [[b.tolist() for b in u] for u in got] == reference_updates(expected, spec.training, epoch, width)


def test_batches_of_lists_and_of_a_prepared_corpus_agree_without_a_seed():
    examples = [([5] * (1 + i % 37) + [2], [1] + [6] * (1 + (i * 7) % 41) + [2]) for i in range(300)]
    for width in (None, 8):
        got = [b.tolist() for b in batch_indices(examples, 400, None, width)]
        assert got == reference_batches(examples, 400, None, width)
