"""A run's data: its settings (`data:` of a spec), the corpus read, the vocabularies trained (or loaded),
every split encoded. Shared across runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated

from pydantic import Field, PositiveInt, model_validator

from ablate.config import ADDED, Section, part
from ablate.data.batches import Example, encode_pairs
from ablate.data.corpus import CORPUS, data_dir
from ablate.data.tokenizer import TokenizerSpec, Vocabulary, vocabularies
from ablate.errors import SpecValueError
from ablate.registry import PartSpec


class DataSpec(Section):
    """Which corpus, which direction, which splits."""

    corpus: Annotated[PartSpec, CORPUS] = part(CORPUS, "multi30k")
    source: str = Field("en", description="source language")
    target: str = Field("de", description="target language")
    train: str = Field("train", description="split to train (and learn the vocabulary) on")
    valid: str = Field("val", description="split for validation loss and BLEU during training")
    test: list[str] = Field(["test_2016_flickr"], min_length=1, description="splits scored after training")
    data_dir: str | None = Field(None, description="where corpus files are; default $ABLATE_DATA_DIR or the cache")
    max_pairs: PositiveInt | None = Field(None, description="use only the first N pairs of every split (for tests)")
    max_len: PositiveInt = Field(128, description="training pairs longer than this many tokens are left out")
    max_train_length: PositiveInt | None = Field(
        None,
        description="train only on pairs whose source has at most this many words (whitespace-separated), "
        "to see how positions extrapolate to the longer test sentences; the vocabulary is still learned from all",
        json_schema_extra=ADDED,
    )

    @model_validator(mode="after")
    def _direction(self) -> DataSpec:
        if self.source == self.target:
            raise SpecValueError(f"source and target are both '{self.source}'", ("target",))
        return self


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
