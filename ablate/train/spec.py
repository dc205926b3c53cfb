"""The run's spec: everything one run needs, its sections validated before, and without, any tensor (torch-free,
docs/architecture.md): the sweep, the report and `ablate check` read specs with these classes.

    model       ModelSpec       ablate.model.spec
    tokenizer   TokenizerSpec   ablate.data.tokenizer
    data        DataSpec        ablate.data.spec
    training    TrainingSpec    here: the Trainer (ablate.train.trainer) runs it
    evaluation  EvaluationSpec  here: ablate.train.evaluation decodes and scores by it

RunSpec assembles them and checks what spans two sections.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from ablate.config import ADDED, BOOKKEEPING, Probability, Section, added, part
from ablate.data.spec import DataSpec
from ablate.data.tokenizer import TokenizerSpec
from ablate.errors import SpecValueError
from ablate.model.spec import ModelSpec
from ablate.registry import PartSpec
from ablate.train.schedules import SCHEDULE
from ablate.train.stopping import EarlyStoppingSpec

__all__ = ["DataSpec", "EvaluationSpec", "ModelSpec", "RunSpec", "TokenizerSpec", "TrainingSpec"]


DEFERRED_STEPS = 25  # training.sync_every: auto on CUDA (at 7.5 ms a step, a read every 0.2 s)


class TrainingSpec(Section):
    """Optimisation: Adam with the paper's betas, a schedule, and when to stop, validate and save."""

    schedule: Annotated[PartSpec, SCHEDULE] = part(SCHEDULE, "noam")
    betas: tuple[float, float] = Field((0.9, 0.98), strict=False, description="Adam's beta1, beta2 (§5.3)")
    eps: PositiveFloat = Field(1e-9, description="Adam's epsilon (§5.3)")
    weight_decay: NonNegativeFloat = Field(0.0, description="decoupled weight decay (AdamW) when above 0")
    adam_kernel: Literal["default", "foreach", "fused"] = Field(
        "fused",
        description="how Adam's update runs: fused (one kernel a parameter group), torch's default (a kernel a "
        "parameter on the CPU, foreach on CUDA) or foreach (one over all parameters); the same update with "
        "another round-off (benchmarks/README.md measures them)",
        json_schema_extra=added(was="default"),
    )
    label_smoothing: Probability = Field(0.1, description="epsilon_ls (§5.4)")
    cross_entropy: Literal["torch", "chunked"] = Field(
        "chunked",
        description="how the training loss runs: chunked (64 rows at a time, more under 4,096 words; a "
        "one-pass backward, no fp32 copy of bf16 logits; ablate/train/loss.py) or torch (F.cross_entropy on "
        "fp32 logits): the same loss to round-off",
        json_schema_extra=added(was="torch"),
    )
    clip_norm: PositiveFloat | None = Field(
        None,
        description="clip the global L2 norm of each update's gradient (of the loss a target token, after the ranks' "
        "all-reduce) to this before Adam's step, as fairseq's --clip-norm; null: never",
    )
    max_tokens: PositiveInt = Field(4096, description="tokens a batch, padding included, on the longer side")
    shape_buckets: PositiveInt | Literal["auto"] | None = Field(
        "auto",
        description="pad every batch to its bucket, a multiple of this many tokens on both sides, with max_tokens // "
        "bucket pairs: two shapes a bucket, whose kernels are built once (ablate/data/batches.py); null: each batch "
        "padded to its longest sentence; auto: 8 in bf16 (on the CPU oneDNN builds a kernel a shape), null in fp32",
        json_schema_extra=added(was=None),
    )
    batch_tokens: PositiveInt | None = Field(None, description="accumulate batches until this many target tokens")
    max_steps: PositiveInt | None = Field(None, description="stop after this many optimizer steps")
    max_epochs: PositiveInt | None = Field(None, description="stop after this many passes over the data")
    max_target_tokens: PositiveInt | None = Field(
        None, description="stop after training on this many target tokens", json_schema_extra=ADDED
    )
    max_flops: PositiveFloat | None = Field(
        None,
        description="stop after this many training FLOPs (forward and backward, torch's FlopCounterMode)",
        json_schema_extra=ADDED,
    )
    max_seconds: PositiveFloat | None = Field(
        None,
        description="stop after this many seconds of optimizer steps on the run's device (wall clock)",
        json_schema_extra=ADDED,
    )
    peak_tflops: PositiveFloat | None = Field(
        None,
        description="the device's peak TFLOP/s for MFU; default: a timed matmul, measured once a machine",
        json_schema_extra=BOOKKEEPING,
    )
    early_stopping: EarlyStoppingSpec | None = Field(
        None,
        description="stop when the validation curve stops improving: {metric: valid_loss | valid_bleu, patience: N "
        "validations, min_delta: x}; the budget (max_steps, ...) stays the cap; null: train to the budget",
        json_schema_extra=ADDED,
    )
    validate_every: PositiveInt | Literal["epoch"] | None = Field(
        None,
        description="validation loss and BLEU every N steps (and at the end); epoch: at the end of every pass over "
        "the data (fairseq's default), however many steps a pass takes; null: at every tenth of the budget",
    )
    diagnostics_every: NonNegativeInt | None = Field(
        None,
        description="gradient, attention and norm diagnostics every N steps; null: at each validation; 0: never",
        json_schema_extra=BOOKKEEPING,  # the diagnostics test shows that measuring them does not change training
    )
    valid_bleu_pairs: NonNegativeInt = Field(200, description="validation pairs decoded for BLEU; 0 for loss only")
    checkpoint_every: PositiveInt | Literal["epoch"] | None = Field(
        1000,
        description="save a checkpoint every N steps, at the end and on Ctrl-C; epoch: at the end of every pass "
        "over the data (fairseq's epoch checkpoints: averaging then takes the last passes); null: never (no resume)",
        json_schema_extra=BOOKKEEPING,  # the resume test shows that saving does not change training (but see
    )  # ablate.rundir.config_hash: with checkpoint averaging on, the checkpoints are what is averaged)
    seed: int = Field(1, description="seeds model init, dropout and batch order")
    device: str = Field("auto", description="auto (a GPU when there is one), cpu, cuda, cuda:N")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="bf16: autocast, fp32 weights (on the CPU attention in fp32); auto: bf16 on CUDA and CPUs with "
        "native bf16, else fp32",
    )
    diverge_loss: PositiveFloat = Field(
        1e3, description="a training loss above this (or NaN/inf) ends the run as diverged"
    )
    sync_every: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="read the training loss back from the device every N steps, the one wait for the device a step "
        "has: the losses of the steps between are kept on the device, then logged and checked for divergence "
        "together, each at its own step; the run trains the same. auto: every step on a CPU; on CUDA every "
        f"{DEFERRED_STEPS} (read before each validation, checkpoint and budget point), but every step with "
        "max_seconds or several processes",
        json_schema_extra=BOOKKEEPING,  # the same updates and losses (tests/test_training.py)
    )
    cuda_graphs: bool | Literal["auto"] = Field(
        "auto",
        description="replay each batch shape's update (forward, backward, Adam) as a CUDA graph, captured the first "
        "time the shape is met (ablate/train/graphs.py): no Python or kernel launches in the step. auto: on CUDA "
        "with shape_buckets (whose shapes are few) in one process; never on a CPU",
        json_schema_extra=BOOKKEEPING,  # an execution detail of the device, as the device is: eager's losses within
    )  # bf16 round-off (tests/test_graphs.py); a CPU run never captures

    @model_validator(mode="after")
    def _stops(self) -> TrainingSpec:
        if all(getattr(self, budget) is None for budget in BUDGETS):
            raise SpecValueError(f"set one of {', '.join(BUDGETS)}: training needs a point to stop", ("max_steps",))
        return self

    @model_validator(mode="after")
    def _early_stopping(self) -> TrainingSpec:
        stopping = self.early_stopping
        if stopping is not None and stopping.metric == "valid_bleu" and self.valid_bleu_pairs == 0:
            raise SpecValueError("metric valid_bleu needs training.valid_bleu_pairs above 0: it is the greedy BLEU "
                                 "of those validation pairs", ("early_stopping", "metric"))  # fmt: skip
        return self

    def bucket_width(self, precision: str) -> int | None:
        """`shape_buckets` resolved for the run's precision (resolved): `auto` is 8 in bf16, where on the CPU oneDNN
        builds a kernel for each matmul shape and a worker keeps 32 of them, and none in fp32, where the padding
        costs more than the shapes (MKL's kernels; benchmarks/README.md). Never the device: the buckets decide
        which pairs train together and how many a step, so the run a config hash names must have the same ones on
        a CPU and a GPU (until 2026-11-26 auto was none on a GPU: 13% more target tokens in 8,000 steps). With
        `precision: auto` the precision itself, and so the buckets, still follow the device: pin it for that."""
        if self.shape_buckets == "auto":
            return 8 if precision == "bf16" else None
        return self.shape_buckets

    def budgets(self) -> dict[str, float]:
        """The limits this run stops at, the first reached ending it: {"max_steps": 1450, ...}."""
        return {name: getattr(self, name) for name in BUDGETS if getattr(self, name) is not None}


BUDGETS = ("max_steps", "max_epochs", "max_target_tokens", "max_flops", "max_seconds")
"""What a run's length can be set in: steps, passes, target tokens, training FLOPs, seconds of training."""
POINT_BUDGETS = ("max_steps", "max_target_tokens", "max_flops")
"""The budgets that budget points (evaluation.budgets) may be counted in: those a rerun reaches at the same step."""

VALIDATIONS = 10  # without validate_every, a run validates at each tenth of its budget: curves of 11 points


class EvaluationSpec(Section):
    """Decoding and scoring of the test splits (beam search with the paper's settings, §6.1)."""

    beam_size: PositiveInt = Field(4, description="1 decodes greedily")
    length_penalty: NonNegativeFloat = Field(
        0.6, description="alpha of the length penalty lp(Y) that beam search divides log-probabilities by"
    )
    length_penalty_form: Literal["gnmt", "fairseq"] = Field(
        "gnmt",
        description="gnmt: lp(Y) = ((5 + |Y|) / 6)^alpha, the paper's (§6.1); fairseq: lp(Y) = |Y|^alpha, fairseq's "
        "--lenpen (its default 1: the mean log-probability a token), for papers trained and decoded with fairseq; "
        "|Y| counts </s>",
        json_schema_extra=ADDED,
    )
    max_extra_len: NonNegativeInt = Field(50, description="output at most source length + this many tokens")
    batch_size: PositiveInt = Field(100, description="sentences decoded together")
    lowercase: bool = Field(
        False, description="lowercased BLEU, to compare with papers that report it (the cased BLEU is kept beside it)"
    )
    average_checkpoints: PositiveInt = Field(
        1,
        description="decode the mean of the last N checkpoints (training.checkpoint_every apart); 1: the last",
        json_schema_extra=ADDED,
    )
    select: Literal["last", "best"] = Field(
        "last",
        description="which weights are scored: last (the last average_checkpoints checkpoints) or best (the "
        "average_checkpoints checkpoints up to the best validation of training.early_stopping's metric)",
        json_schema_extra=ADDED,
    )
    budgets: list[PositiveFloat] | None = Field(
        None,
        min_length=1,
        description="budget points, in the unit of the run's budget (training.max_steps, max_target_tokens or "
        "max_flops): the run is decoded and scored at each as at its end; the last is the run's end",
        json_schema_extra=ADDED,
    )
    length_buckets: list[PositiveInt] = Field(
        [10, 20, 30],
        min_length=1,
        description="upper ends, in source words, of the buckets BLEU and chrF are "
        "broken down by (compare-mt's); the last bucket is open: 1-10, 11-20, 21-30, 31+",
        json_schema_extra=ADDED,
    )

    @model_validator(mode="after")
    def _buckets(self) -> EvaluationSpec:
        if any(a >= b for a, b in zip(self.length_buckets, self.length_buckets[1:], strict=False)):
            raise SpecValueError(f"must increase, got {self.length_buckets}", ("length_buckets",))
        budgets = self.budgets or []
        if any(a >= b for a, b in itertools.pairwise(budgets)):
            raise SpecValueError(f"must increase, got [{', '.join(f'{b:g}' for b in budgets)}]", ("budgets",))
        return self


class RunSpec(Section):
    """Everything one run needs."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=lambda: TrainingSpec(max_steps=100_000))
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)

    def warnings(self) -> list[str]:
        """What is valid but cannot do what it says: `dotted.key: why`, one line each."""
        out = []
        training = self.training
        stopping, every, steps = training.early_stopping, training.validate_every, training.max_steps
        if stopping is not None and steps is not None and every != "epoch":
            validations = steps // every if every else VALIDATIONS
            if stopping.patience >= validations:
                out.append(f"training.early_stopping.patience: {stopping.patience} validations without improvement, "
                           f"but the run validates {validations} times in its {steps:,} steps, so early stopping "
                           "can never end it")  # fmt: skip
        if self.data.lowercase and not self.evaluation.lowercase:
            out.append("evaluation.lowercase: false scores lowercase translations (data.lowercase: true) against cased "
                       "references, so every capital is a miss: set it true, as papers that lowercase do")  # fmt: skip
        return out

    @model_validator(mode="after")
    def _averaging(self) -> RunSpec:
        if self.evaluation.average_checkpoints > 1 and self.training.checkpoint_every is None:
            raise SpecValueError(
                f"averaging {self.evaluation.average_checkpoints} checkpoints needs training.checkpoint_every",
                ("evaluation", "average_checkpoints"),
            )
        return self

    @model_validator(mode="after")
    def _epoch_checkpoints(self) -> RunSpec:
        """Budget points are counted in steps, tokens or FLOPs; a pass's checkpoints are not among them."""
        if self.training.checkpoint_every == "epoch" and self.evaluation.budgets is not None:
            raise SpecValueError("checkpoints once an epoch cannot be scored at budget points: set "
                                 "training.checkpoint_every to a number of steps",
                                 ("training", "checkpoint_every"))  # fmt: skip
        return self

    @model_validator(mode="after")
    def _select_best(self) -> RunSpec:
        """The best weights are those of a validation step, kept: every validation is a checkpoint with weights."""
        if self.evaluation.select != "best":
            return self
        training, where = self.training, ("evaluation", "select")
        if training.early_stopping is None:
            raise SpecValueError("best needs training.early_stopping: its metric says which validation is best", where)
        every, validate = training.checkpoint_every, training.validate_every
        by_epoch = "epoch" in (every, validate)
        if every is None or validate is None or (every != validate if by_epoch else validate % every):
            raise SpecValueError(f"best needs training.validate_every ({validate}) to be a multiple of "
                                 f"training.checkpoint_every ({every}), so that every validation keeps its weights",
                                 where)  # fmt: skip
        if self.evaluation.budgets is not None and SCHEDULE.build(training.schedule, d_model=1).cooldown is not None:
            raise SpecValueError("best cannot score wsd's budget points: a cooldown branch does not validate", where)
        return self

    @model_validator(mode="after")
    def _joint_vocabulary(self) -> RunSpec:
        tying = self.model.tying
        if tying.declared.joint_vocabulary and not self.tokenizer.joint:
            raise SpecValueError(
                f"tying '{tying.name}' shares one matrix across languages and needs tokenizer.joint: true",
                ("model", "tying"),
            )
        return self

    @model_validator(mode="after")
    def _budget_points(self) -> RunSpec:
        """Budget points in the run's one reproducible unit, ending where it ends, on a schedule that allows them."""
        points = self.evaluation.budgets
        if points is None:
            return self
        where = ("evaluation", "budgets")
        limits = self.training.budgets()
        if len(limits) != 1 or next(iter(limits)) not in POINT_BUDGETS:
            raise SpecValueError(
                f"budget points need the run's length in exactly one of training.{', '.join(POINT_BUDGETS)}, "
                f"got {', '.join(f'training.{k}' for k in limits)}",
                where,
            )
        ((unit, end),) = limits.items()
        if unit == "max_steps" and any(p != int(p) for p in points):
            raise SpecValueError(f"steps are whole numbers, got [{', '.join(f'{p:g}' for p in points)}]", where)
        if points[-1] != end:
            raise SpecValueError(f"the last budget point ({points[-1]:g}) must be the run's end, training.{unit} "
                                 f"({end:g})", where)  # fmt: skip
        schedule = SCHEDULE.build(self.training.schedule, d_model=self.model.d_model)
        if schedule.uses_length and schedule.cooldown is None and len(points) > 1:
            raise SpecValueError(
                f"schedule '{self.training.schedule.name}' depends on the run's length, so a budget point is not "
                "the run of that length: use wsd, whose budget points are cooldown branches, or a schedule "
                "that does not (inverse_sqrt, noam, linear_warmup, constant)",
                where,
            )
        return self
