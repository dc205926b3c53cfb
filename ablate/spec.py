"""The spec: what one run is, as validated data. Built before, and without, any tensor.

Defaults are the paper's base model (Vaswani et al. 2017, Table 3 "base"), so a YAML file
lists only what it changes. Each ablation axis is one field whose valid values are the
parts registered in its slot.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from ablate.errors import SpecValueError
from ablate.parts import EMBEDDING_SCALE, FEEDFORWARD, NORM, NORM_PLACEMENT, POSITIONS, SCALING, TYING
from ablate.registry import PartSpec, Slot

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]


def part(slot: Slot, default: str) -> Any:
    """A field whose value names a part of `slot`: `learned` or `{name: learned, max_len: 512}`."""
    return Field(default=default, validate_default=True, description=slot.description)


class Section(BaseModel):
    """A spec section: unknown keys and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ModelSpec(Section):
    """The architecture: sizes, dropout, and one part for each ablation axis."""

    d_model: PositiveInt = Field(512, description="width of every residual stream")
    heads: PositiveInt = Field(8, description="attention heads, h")
    d_k: PositiveInt | None = Field(None, description="width of one head (= d_v); default d_model / heads")
    d_ff: PositiveInt = Field(2048, description="hidden width of the feed-forward network")
    encoder_layers: PositiveInt = Field(6, description="N for the encoder")
    decoder_layers: PositiveInt = Field(6, description="N for the decoder")
    dropout: Probability = Field(0.1, description="P_drop on each sublayer output and on embeddings + positions")
    attention_dropout: Probability = Field(0.0, description="dropout on attention weights")
    activation_dropout: Probability = Field(0.0, description="dropout on the feed-forward hidden activations")

    positions: Annotated[PartSpec, POSITIONS] = part(POSITIONS, "sinusoidal")
    norm_placement: Annotated[PartSpec, NORM_PLACEMENT] = part(NORM_PLACEMENT, "post_ln")
    norm: Annotated[PartSpec, NORM] = part(NORM, "layernorm")
    scaling: Annotated[PartSpec, SCALING] = part(SCALING, "sqrt_dk")
    feedforward: Annotated[PartSpec, FEEDFORWARD] = part(FEEDFORWARD, "relu")
    embedding_scale: Annotated[PartSpec, EMBEDDING_SCALE] = part(EMBEDDING_SCALE, "sqrt_dmodel")
    tying: Annotated[PartSpec, TYING] = part(TYING, "all")

    @model_validator(mode="after")
    def _dimensions(self) -> ModelSpec:
        if self.d_k is None:
            if self.d_model % self.heads:
                raise SpecValueError(
                    f"heads={self.heads} does not divide d_model={self.d_model}; "
                    "choose heads that divide it, or set d_k",
                    ("heads",),
                )
            self.d_k = self.d_model // self.heads
        dims = {"d_model": self.d_model, "heads": self.heads, "d_k": self.d_k, "d_ff": self.d_ff}
        for name in PART_FIELDS:
            choice: PartSpec = getattr(self, name)
            try:
                choice.cls.check(choice.params, **dims)
            except SpecValueError as error:
                raise SpecValueError(error.msg, (name, *error.loc)) from None
        return self

    def parts(self) -> dict[str, PartSpec]:
        return {name: getattr(self, name) for name in PART_FIELDS}


PART_FIELDS = [name for name, f in ModelSpec.model_fields.items() if any(isinstance(m, Slot) for m in f.metadata)]


class TokenizerSpec(Section):
    """Subword vocabulary. Training it comes with the data pipeline; its sizes already shape the model."""

    vocab_size: PositiveInt = Field(37000, description="BPE vocabulary size (per language when not joint)")
    joint: bool = Field(True, description="one vocabulary shared by source and target")


class RunSpec(Section):
    """Everything one run needs."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)

    @model_validator(mode="after")
    def _joint_vocabulary(self) -> RunSpec:
        tying = self.model.tying
        if tying.cls.joint_vocabulary and not self.tokenizer.joint:
            raise SpecValueError(
                f"tying '{tying.name}' shares one matrix across languages and needs tokenizer.joint: true",
                ("model", "tying"),
            )
        return self
