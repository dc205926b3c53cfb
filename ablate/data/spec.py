"""The data's spec (`data:` of a run): which corpus, which direction, which splits, how the text is prepared
(ablate.data.preprocess). Torch-free, as every spec section is (docs/architecture.md): the report, the sweep and
`ablate check` validate a spec without building a tensor; ablate.data.dataset reads the corpus it names."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, PositiveInt, model_validator

from ablate.config import ADDED, Section, part
from ablate.data.corpus import CORPUS
from ablate.data.preprocess import TOKENIZE
from ablate.errors import SpecValueError
from ablate.registry import PartSpec


class DataSpec(Section):
    """Which corpus, which direction, which splits, and how the text is prepared before BPE."""

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
    lowercase: bool = Field(
        False,
        description="lowercase both sides before tokenising and BPE, as papers that report lowercase BLEU did (the "
        "references stay raw: score with evaluation.lowercase: true)",
        json_schema_extra=ADDED,
    )
    tokenize: Annotated[PartSpec, TOKENIZE] = part(TOKENIZE, "none", ADDED)

    @model_validator(mode="after")
    def _direction(self) -> DataSpec:
        if self.source == self.target:
            raise SpecValueError(f"source and target are both '{self.source}'", ("target",))
        return self
