"""The spec: what one run is, as validated data. Built before, and without, any tensor.

Defaults are the paper's base model (Vaswani et al. 2017, Table 3 "base"), so a YAML file
lists only what it changes. Each ablation axis is one field whose valid values are the
parts registered in its slot.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from ablate.data.dataset import DataSpec
from ablate.data.tokenizer import TokenizerSpec
from ablate.errors import SpecValueError
from ablate.parts import EMBEDDING_SCALE, FEEDFORWARD, NORM, NORM_PLACEMENT, POSITIONS, PROJECTION, SCALING, TYING
from ablate.registry import PartSpec, Slot
from ablate.schedules import SCHEDULE
from ablate.sections import Probability, Section, part

__all__ = ["DataSpec", "EvaluationSpec", "ModelSpec", "RunSpec", "TokenizerSpec", "TrainingSpec"]


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
    projection: Annotated[PartSpec, PROJECTION] = part(PROJECTION, "full")
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
"""The model's ablation axes; each field is named as its slot."""


class TrainingSpec(Section):
    """Optimisation: Adam with the paper's betas, a schedule, and when to stop, validate and save."""

    schedule: Annotated[PartSpec, SCHEDULE] = part(SCHEDULE, "noam")
    betas: tuple[float, float] = Field((0.9, 0.98), strict=False, description="Adam's beta1, beta2 (§5.3)")
    eps: PositiveFloat = Field(1e-9, description="Adam's epsilon (§5.3)")
    weight_decay: NonNegativeFloat = Field(0.0, description="decoupled weight decay (AdamW) when above 0")
    label_smoothing: Probability = Field(0.1, description="epsilon_ls (§5.4)")
    clip_norm: PositiveFloat | None = Field(None, description="clip the gradient's global norm to this")
    max_tokens: PositiveInt = Field(4096, description="tokens a batch, padding included, on the longer side")
    batch_tokens: PositiveInt | None = Field(None, description="accumulate batches until this many target tokens")
    max_steps: PositiveInt | None = Field(None, description="stop after this many optimizer steps")
    max_epochs: PositiveInt | None = Field(None, description="stop after this many passes over the data")
    max_target_tokens: PositiveInt | None = Field(None, description="stop after training on this many target tokens")
    max_flops: PositiveFloat | None = Field(
        None, description="stop after this many training FLOPs (forward and backward, torch's FlopCounterMode)"
    )
    max_seconds: PositiveFloat | None = Field(
        None, description="stop after this many seconds of optimizer steps on the run's device (wall clock)"
    )
    peak_tflops: PositiveFloat | None = Field(
        None, description="the device's peak TFLOP/s for MFU; default: a timed matmul, measured once a machine"
    )
    validate_every: PositiveInt | None = Field(
        None, description="validation loss and BLEU every N steps (and at the end); null: at every tenth of the budget"
    )
    diagnostics_every: NonNegativeInt | None = Field(
        None, description="gradient, attention and norm diagnostics every N steps; null: at each validation; 0: never"
    )
    valid_bleu_pairs: NonNegativeInt = Field(200, description="validation pairs decoded for BLEU; 0 for loss only")
    checkpoint_every: PositiveInt | None = Field(
        1000, description="save a checkpoint every N steps, at the end and on Ctrl-C; null: never (no resume)"
    )
    seed: int = Field(1, description="seeds model init, dropout and batch order")
    device: str = Field("auto", description="auto (a GPU when there is one), cpu, cuda, cuda:N")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="bf16: autocast, fp32 weights; auto: bf16 on CUDA and CPUs with native bf16, else fp32"
    )
    diverge_loss: PositiveFloat = Field(
        1e3, description="a training loss above this (or NaN/inf) ends the run as diverged"
    )

    @model_validator(mode="after")
    def _stops(self) -> TrainingSpec:
        if all(getattr(self, budget) is None for budget in BUDGETS):
            raise SpecValueError(f"set one of {', '.join(BUDGETS)}: training needs a point to stop", ("max_steps",))
        return self

    def budgets(self) -> dict[str, float]:
        """The limits this run stops at, the first reached ending it: {"max_steps": 1450, ...}."""
        return {name: getattr(self, name) for name in BUDGETS if getattr(self, name) is not None}


BUDGETS = ("max_steps", "max_epochs", "max_target_tokens", "max_flops", "max_seconds")
"""What a run's length can be set in: steps, passes, target tokens, training FLOPs, seconds of training."""


class EvaluationSpec(Section):
    """Decoding and scoring of the test splits (beam search with the paper's settings, §6.1)."""

    beam_size: PositiveInt = Field(4, description="1 decodes greedily")
    length_penalty: NonNegativeFloat = Field(0.6, description="alpha of the GNMT length penalty")
    max_extra_len: NonNegativeInt = Field(50, description="output at most source length + this many tokens")
    batch_size: PositiveInt = Field(100, description="sentences decoded together")
    lowercase: bool = Field(False, description="lowercased BLEU, to compare with papers that report it")
    average_checkpoints: PositiveInt = Field(
        1, description="decode the mean of the last N checkpoints (training.checkpoint_every apart); 1: the last"
    )
    length_buckets: list[PositiveInt] = Field(
        [10, 20, 30],
        min_length=1,
        description="upper ends, in source words, of the buckets BLEU and chrF are "
        "broken down by (compare-mt's); the last bucket is open: 1-10, 11-20, 21-30, 31+",
    )

    @model_validator(mode="after")
    def _buckets(self) -> EvaluationSpec:
        if any(a >= b for a, b in zip(self.length_buckets, self.length_buckets[1:], strict=False)):
            raise SpecValueError(f"must increase, got {self.length_buckets}", ("length_buckets",))
        return self


class RunSpec(Section):
    """Everything one run needs."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=lambda: TrainingSpec(max_steps=100_000))
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)

    @model_validator(mode="after")
    def _averaging(self) -> RunSpec:
        if self.evaluation.average_checkpoints > 1 and self.training.checkpoint_every is None:
            raise SpecValueError(
                f"averaging {self.evaluation.average_checkpoints} checkpoints needs training.checkpoint_every",
                ("evaluation", "average_checkpoints"),
            )
        return self

    @model_validator(mode="after")
    def _joint_vocabulary(self) -> RunSpec:
        tying = self.model.tying
        if tying.cls.joint_vocabulary and not self.tokenizer.joint:
            raise SpecValueError(
                f"tying '{tying.name}' shares one matrix across languages and needs tokenizer.joint: true",
                ("model", "tying"),
            )
        return self
