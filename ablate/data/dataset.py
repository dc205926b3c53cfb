"""A run's data: the corpus its spec names (ablate.data.spec), the vocabularies trained (or loaded), every split
encoded. Shared across runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from ablate.data.batches import Example, encode_pairs
from ablate.data.corpus import CORPUS, data_dir
from ablate.data.spec import DataSpec
from ablate.data.tokenizer import TokenizerSpec, Vocabulary, vocabularies


@dataclass(frozen=True)
class Dataset:
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    train: list[Example]
    valid_pairs: list[tuple[str, str]]
    valid: list[Example]
    tests: dict[str, list[tuple[str, str]]]
    dropped: int  # training pairs left out for being longer than max_len or max_train_length


def load_dataset(data: DataSpec, tokenizer: TokenizerSpec) -> Dataset:
    return _load(data.model_dump_json(), tokenizer.model_dump_json())


@lru_cache(maxsize=4)
def _load(data_json: str, tokenizer_json: str) -> Dataset:
    data, tokenizer = DataSpec.model_validate_json(data_json), TokenizerSpec.model_validate_json(tokenizer_json)
    corpus = CORPUS.build(data.corpus, root=data_dir(data.data_dir))

    def read(split: str) -> list[tuple[str, str]]:
        pairs = corpus.read(split, data.source, data.target)
        return pairs[: data.max_pairs] if data.max_pairs else pairs

    train_pairs = read(data.train)
    # The vocabulary is cached under what it was learned from: the training files' content, not their
    # names (a file edited in place, or another data directory with the same relative paths, is new text).
    content = corpus.fingerprint(data.train, [data.source, data.target])
    corpus_key = json.dumps([data.corpus.name, content, data.source, data.target, data.train, data.max_pairs])
    src_vocab, tgt_vocab = vocabularies(train_pairs, tokenizer, corpus_key)
    total = len(train_pairs)
    if data.max_train_length is not None:
        train_pairs = [(s, t) for s, t in train_pairs if len(s.split()) <= data.max_train_length]
    encoded = encode_pairs(train_pairs, src_vocab, tgt_vocab)
    train = [e for e in encoded if max(len(e[0]), len(e[1]) - 1) <= data.max_len]
    valid_pairs = read(data.valid)
    tests = {split: read(split) for split in data.test}
    return Dataset(src_vocab, tgt_vocab, train, valid_pairs, encode_pairs(valid_pairs, src_vocab, tgt_vocab), tests,
                   total - len(train))  # fmt: skip
