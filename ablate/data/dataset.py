"""A run's data: the corpus its spec names (ablate.data.spec), prepared once (ablate.data.prepared: the vocabularies
learned, the training and validation splits encoded and memory-mapped), and the test splits' text. Shared across
runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ablate.data.batches import Example
from ablate.data.corpus import CORPUS, data_dir
from ablate.data.prepared import Prepared, Report, Say, TokenPairs, prepare
from ablate.data.spec import DataSpec
from ablate.data.tokenizer import TokenizerSpec, Vocabulary


@dataclass(frozen=True)
class Dataset:
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    train: Sequence[Example]  # memory-mapped (TokenPairs): lengths in memory, tokens read when a batch is collated
    valid_pairs: list[tuple[str, str]]
    valid: list[Example]
    tests: dict[str, list[tuple[str, str]]]
    dropped: int  # training pairs left out for being longer than max_len or max_train_length


def load_dataset(data: DataSpec, tokenizer: TokenizerSpec) -> Dataset:
    return _load(data.model_dump_json(), tokenizer.model_dump_json())


def prepare_dataset(data: DataSpec, tokenizer: TokenizerSpec, report: Report, say: Say, verify: bool = True
                    ) -> Prepared:  # fmt: skip
    """The corpus prepared, and checked, without loading it: what a sweep does before its workers start."""
    return prepare(data, tokenizer, report, say, verify)


@lru_cache(maxsize=4)
def _load(data_json: str, tokenizer_json: str) -> Dataset:
    data, tokenizer = DataSpec.model_validate_json(data_json), TokenizerSpec.model_validate_json(tokenizer_json)
    prepared = prepare(data, tokenizer)
    corpus = CORPUS.build(data.corpus, root=data_dir(data.data_dir))

    def read(split: str) -> list[tuple[str, str]]:
        return list(corpus.stream(split, data.source, data.target, data.max_pairs))

    train = prepared.pairs(data.train)
    keep = np.maximum(train.src_lengths, train.tgt_lengths - 1) <= data.max_len
    if data.max_train_length is not None:
        keep &= train.words <= data.max_train_length
    kept: TokenPairs = train.where(keep)
    tests = {split: read(split) for split in data.test}
    return Dataset(prepared.src_vocab, prepared.tgt_vocab, kept, read(data.valid), list(prepared.pairs(data.valid)),
                   tests, len(train) - len(kept))  # fmt: skip
