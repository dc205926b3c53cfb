"""The model's spec: its sizes, its dropout, and one registered part for each ablation axis.

Defaults are the paper's base model (Vaswani et al. 2017, Table 3 "base"), so a YAML file lists only
what it changes. Validated before, and without, any tensor: the parts a spec names are checked against their
declarations (ablate.parts.declared), torch-free; ablate.model.transformer builds from it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from ablate.config import ADDED, Probability, Section, added, part
from ablate.errors import SpecValueError
from ablate.parts import EMBEDDING_SCALE, FEEDFORWARD, NORM, NORM_PLACEMENT, POSITIONS, PROJECTION, SCALING, TYING
from ablate.registry import PartSpec, Slot


class ModelSpec(Section):
    """The architecture: sizes, dropout, and one part for each ablation axis."""

    d_model: PositiveInt = Field(512, description="width of every residual stream")
    heads: PositiveInt = Field(8, description="attention heads, h")
    d_k: PositiveInt | None = Field(None, description="width of one head's queries and keys; default d_model / heads")
    d_v: PositiveInt | None = Field(
        None,
        description="width of one head's values, so W^O is heads * d_v wide; default (null) d_k. Table 3 row B "
        "changed d_k alone and kept d_v = 64",
        json_schema_extra=ADDED,
    )
    d_ff: PositiveInt = Field(2048, description="hidden width of the feed-forward network")
    encoder_layers: PositiveInt = Field(6, description="N for the encoder")
    decoder_layers: PositiveInt = Field(6, description="N for the decoder")
    dropout: Probability = Field(0.1, description="P_drop on each sublayer output and on embeddings + positions")
    attention_dropout: Probability = Field(0.0, description="dropout on attention weights")
    activation_dropout: Probability = Field(0.0, description="dropout on the feed-forward hidden activations")
    dropout_sampler: Literal["bernoulli", "bits16"] = Field(
        "bits16",
        description="how an nn.Dropout's mask is drawn (dropout and activation_dropout): bits16 (16 random bits an "
        "element, p to a multiple of 1/65536: a mask 4x as fast to draw on the CPU; ablate/parts/dropout.py) or "
        "bernoulli (torch's, a Bernoulli draw an element); attention_dropout is SDPA's own, torch's sampler either way",
        json_schema_extra=added(was="bernoulli"),
    )

    positions: Annotated[PartSpec, POSITIONS] = part(POSITIONS, "sinusoidal")
    norm_placement: Annotated[PartSpec, NORM_PLACEMENT] = part(NORM_PLACEMENT, "post_ln")
    norm: Annotated[PartSpec, NORM] = part(NORM, "layernorm")
    projection: Annotated[PartSpec, PROJECTION] = part(PROJECTION, "full", ADDED)
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
        if self.d_v == self.d_k:  # one model, one spelling (and one config hash): null is d_v = d_k
            self.d_v = None
        dims = dict(d_model=self.d_model, heads=self.heads, d_k=self.d_k, d_v=self.value_width, d_ff=self.d_ff)
        for name in PART_FIELDS:
            choice: PartSpec = getattr(self, name)
            try:
                choice.declared.check(choice.params, **dims)
            except SpecValueError as error:
                raise SpecValueError(error.msg, (name, *error.loc)) from None
        return self

    @property
    def value_width(self) -> int:
        """d_v as the model is built: d_k unless set apart."""
        assert self.d_k is not None  # set by the validator
        return self.d_v or self.d_k

    def parts(self) -> dict[str, PartSpec]:
        return {name: getattr(self, name) for name in PART_FIELDS}


PART_FIELDS = [name for name, f in ModelSpec.model_fields.items() if any(isinstance(m, Slot) for m in f.metadata)]
"""The model's ablation axes; each field is named as its slot."""
