"""The run record: result.json, and a budget point's point.json, defined once. No torch.

The worker writes a `RunResult` (ablate.train.worker, from what ablate.train.pipeline measured); the sweep,
the report and `ablate check` read it through `ablate.rundir.read_result`. A field that is not declared here
is an error when a record is made or read, so a misspelt name fails at once, in the process that wrote it.
Fields are optional where an earlier ablate did not write them, or where a run that failed, diverged or was
reused has none; the committed results under results/ all load (tests/test_record.py).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Status(str, Enum):
    """How a job ended (result.json's `status`), or where it stands when it has no result yet."""

    COMPLETED = "completed"
    DIVERGED = "diverged"  # a result, not a failure: never run again
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped with a checkpoint; the next `ablate run` resumes it
    RUNNING = "running"
    BUSY = "busy"  # another process held the run's lock
    RUNNING_ELSEWHERE = "running elsewhere"
    NOT_RUN = "not run"

    def __str__(self) -> str:
        return self.value


class StoppedBy(str, Enum):
    """What ended a completed run (result.json's `stopped_by`): the limit of its budget it reached first, or early
    stopping before any. The trainer decides it, once (ablate.train.trainer.Outcome)."""

    MAX_STEPS = "max_steps"
    MAX_EPOCHS = "max_epochs"
    MAX_TARGET_TOKENS = "max_target_tokens"
    MAX_FLOPS = "max_flops"
    MAX_SECONDS = "max_seconds"
    EARLY_STOPPING = "early_stopping"

    def __str__(self) -> str:
        return self.value


FINISHED = (Status.COMPLETED, Status.DIVERGED)  # results that stand: never trained again, and reusable

Number = int | float  # kept as written: a budget of 2000 steps stays 2000, not 2000.0
R = TypeVar("R", bound="Record")


class Record(BaseModel):
    """A part of the run record: every field declared, none other accepted."""

    model_config = ConfigDict(extra="forbid", use_enum_values=False)

    def dump(self) -> dict[str, Any]:
        """The record as JSON data: the fields it was given (an explicit None too), none it was not."""
        return self.model_dump(mode="json", exclude_unset=True)

    @classmethod
    def of(cls: type[R], *pieces: Record, **fields: Any) -> R:
        """The record made of `pieces` (the fields each was given) and `fields`, validated; a later one wins. A field
        this record does not declare is an error, as when one is read."""
        merged: dict[str, Any] = {}
        for piece in pieces:
            merged |= {name: getattr(piece, name) for name in piece.model_fields_set}
        return cls.model_validate(merged | fields)


class Step(Record):
    """One update: a line of metrics.jsonl (a cooldown branch's has no epoch and no token counts)."""

    step: int
    epoch: int | None = None
    loss: float
    lr: float
    step_ms: float
    src_tokens: int | None = None
    tgt_tokens: int | None = None
    wall_s: float = Field(description="seconds since the job first started, across restarts")


class Validation(Record):
    """A validation of the model at `step`: a line of metrics.jsonl (ablate.train.evaluation.validate), and what
    early stopping watches."""

    step: int
    valid_loss: float
    valid_ppl: float | None = None
    valid_bleu: float | None = Field(None, description="greedy BLEU on the first validation pairs, when any")
    averaged: int | None = Field(None, description="the checkpoints averaged into the model validated, at the end")
    wall_s: float | None = Field(None, description="seconds since the job first started, when it was logged")


class BucketScore(Record):
    """BLEU and chrF of the test sentences whose source length falls in one bucket (compare-mt's breakdown)."""

    sentences: int
    bleu: float | None = None  # None: an empty bucket
    chrf: float | None = None


class Score(Record):
    """One test split scored with sacreBLEU (ablate.train.evaluation.score)."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    by_length: dict[str, BucketScore] | None = None
    cased_bleu: float | None = Field(
        None,
        description="with evaluation.lowercase: the standard, cased BLEU too (not where data.lowercase trained "
        "the model on lowercased text: it never writes a capital)",
    )
    cased_bleu_signature: str | None = None


class Branch(Record):
    """What a wsd cooldown branch cost: it forked the trunk at `from_step` and trained `steps` more."""

    from_step: int
    steps: int
    seconds: float


class EarlyStop(Record):
    """How early stopping (training.early_stopping) saw the run: its best validation, and whether it stopped."""

    metric: str = Field(description="valid_loss or valid_bleu")
    stopped: bool = Field(description="True: patience ran out before the budget; False: the run reached its cap")
    best_step: int | None = Field(None, description="the validation step with the best value")
    best: float | None = None
    validations_since_best: int = 0


class Cost(Record):
    """What training cost (ablate.train.flops.cost)."""

    train_flops: float | None = Field(
        None, description="forward and backward FLOPs of every update (torch's FlopCounterMode)"
    )
    gflop_per_target_token: float | None = None
    train_tflops_per_s: float | None = Field(None, description="train_flops over the seconds of optimizer steps")
    peak_tflops: float | None = Field(None, description="the device's peak in the run's precision")
    peak_source: str | None = Field(None, description="spec (training.peak_tflops) or measured (a timed matmul)")
    mfu: float | None = None
    budget: dict[str, Number] | None = Field(None, description="the run's length limits: max_steps, ...")
    train_target_tokens: int | None = None


class Evaluation(Record):
    """The model as scored at one step: the mean of the checkpoints evaluation.select names (the last ones, or
    those up to the best validation step), validated, every test split decoded."""

    averaged_steps: list[int] | None = Field(None, description="the checkpoints averaged; None: the last weights")
    valid_loss: float | None = None
    valid_ppl: float | None = None
    scores: dict[str, Score] = Field(default_factory=dict, description="test split -> its scores")
    decode_sentences_per_s: float | None = None

    def bleu(self, split: str | None) -> float | None:
        """The split's BLEU, when it was scored."""
        score = self.scores.get(split) if split else None
        return None if score is None else score.bleu


class BudgetPoint(Evaluation):
    """One budget point (evaluation.budgets): budgets/<b>/point.json, and an entry of result.json's `budget_points`."""

    budget: Number
    step: int | None = None
    epochs: float | None = None
    train_target_tokens: int | None = None
    train_flops: float | None = None
    status: Status = Status.COMPLETED
    error: str | None = None
    valid_bleu: float | None = Field(None, description="greedy BLEU on the first validation pairs")
    branch: Branch | None = Field(None, description="the cooldown branch that made it (wsd)")


# The fields a budget point holds of a run: a run seen at one of its points takes these from the point.
POINT_FIELDS = ("status", "epochs", "scores", "valid_loss", "valid_ppl", "averaged_steps",
                "decode_sentences_per_s", "train_target_tokens", "train_flops", "error")  # fmt: skip


class Identity(Record):
    """Who a job is (ablate.train.job.Job.identity): the first fields of every result of it."""

    experiment: str | None = None
    run: str
    seed: int
    differences: dict[str, Any] = Field(default_factory=dict)
    describe: str = "-"
    config_hash: str | None = None
    arm: str | None = Field(None, description="the run before a learning-rate sweep multiplied it")
    lr: float | None = Field(None, description="the swept peak learning rate, in a learning-rate sweep")


class Ending(Record):
    """How a job ended, or where it stands (the worker's, or a launcher's when the worker left no result)."""

    status: Status
    error: str | None = None
    traceback: str | None = None
    log: str | None = Field(None, description="the end of worker.log, for a worker that died without a result")


class Origin(Record):
    """Where and how the job's process ran (ablate.train.worker), and where a reused result came from."""

    note: str | None = None
    reused_from: str | None = Field(None, description="the job directory that trained this spec and seed")
    torch: str | None = None
    python: str | None = None
    host: str | None = None
    worker: str | None = Field(
        None,
        description="how the worker process began: forked from the fork server (imports done; on the CPU its peak "
        "memory leaves out library pages only the server touched), or fresh",
    )
    started_at: str | None = None
    ended_at: str | None = None
    gpu_ids: list[int] | None = None
    visible_gpus: str | None = None
    runs_per_gpu: int | None = Field(
        None,
        description="jobs the sweep let share the run's GPU (--runs-per-gpu), "
        "when more than one: its speed figures may then measure a shared GPU",
    )
    slurm_job: str | None = None
    slurm_restarts: int | None = None


class Setup(Record):
    """The job as prepared (ablate.train.pipeline): its device, its model and its data."""

    device: str | None = None
    gpus: int | None = None
    processes: int | None = None
    precision: str | None = Field(None, description="what it trained in: fp32 or bf16 (`auto` resolved)")
    params: int | None = None
    src_vocab: int | None = None
    tgt_vocab: int | None = None
    train_pairs: int | None = None
    init_valid_loss: float | None = None
    resumed_from_step: int | None = None


class Training(Record):
    """How training went (ablate.train.pipeline, from the trainer's Outcome and totals): its length, its speed and
    the cores it had, and what ended it."""

    steps: int | None = None
    epochs: float | None = None
    train_seconds: float | None = None
    train_src_tokens_per_s: float | None = None
    train_tgt_tokens_per_s: float | None = None
    step_ms: float | None = None
    threads: int | None = None
    cpu_ids: list[int] | None = None
    core_share: float | None = Field(None, description="the share of its cores the run had to itself")
    cuda_graphs: int | None = Field(
        None, description="batch shapes trained as CUDA graphs (training.cuda_graphs); absent: every step eager"
    )
    diagnostics_seconds: float | None = None
    stopped_by: StoppedBy | None = Field(None, description="the budget limit reached first, or early stopping")
    early_stopping: EarlyStop | None = Field(None, description="training.early_stopping's view of the run")


class Points(Record):
    """Budget points (evaluation.budgets, ablate.train.budgets): each point's record, the run's end last, and what the
    cooldown branches cost."""

    budget_points: list[BudgetPoint] | None = None
    branch_steps: int | None = None
    branch_seconds: float | None = None


class Footprint(Record):
    """What the whole job took: its peak memory and its wall time, across restarts."""

    peak_memory_mib: float | None = None
    wall_seconds: float | None = None


class RunResult(Footprint, Points, Evaluation, Cost, Training, Setup, Origin, Ending, Identity):
    """result.json: one job's identity, how it ended, where it ran, what training cost, and its scores; each field
    declared once, in the piece that writes it."""

    @property
    def ok(self) -> bool:
        return self.status == Status.COMPLETED

    @property
    def finished(self) -> bool:
        """A result that stands: never trained again, and reusable."""
        return self.status in FINISHED

    @property
    def train_tokens_per_s(self) -> float | None:
        if self.train_src_tokens_per_s is None or self.train_tgt_tokens_per_s is None:
            return None
        return self.train_src_tokens_per_s + self.train_tgt_tokens_per_s

    def end_point(self, unit: str) -> BudgetPoint | None:
        """The run's end as a budget point in `unit` (max_steps, ...), when its length is counted in that alone. A
        run that early stopping ended is not a run of its budget, which was a cap it never reached: None."""
        limits = self.budget or {}
        if list(limits) != [unit] or self.stopped_by == StoppedBy.EARLY_STOPPING:
            return None
        return BudgetPoint(budget=limits[unit], step=self.steps, **self.model_dump(include=set(POINT_FIELDS)))

    def at(self, point: BudgetPoint, unit: str | None) -> RunResult:
        """This run as a run ending at `point` would have ended: the point's scores, loss and length."""
        fields = self.model_dump(exclude=set(POINT_FIELDS)) | point.model_dump(include=set(POINT_FIELDS))
        fields["steps"] = point.step
        if unit is not None:
            fields["budget"] = {unit: point.budget}
        return RunResult.model_validate(fields)


def resolved_precision(requested: str, measured: str | None) -> str:
    """A spec's `training.precision` as a run made with it trained: `auto` is what the run measured it to be
    (bf16 on CUDA and on CPUs with native bf16, else fp32); a pinned precision is itself."""
    return measured if requested == "auto" and measured else requested


class DesignRecord(Record):
    """An experiment's design.json: how its rows are judged (ablate.report.decide), written by `ablate run` before
    it trains, so that the report judges as the sweep did."""

    margin: float | None = Field(
        None, description="BLEU; a row shown within ±margin by TOST, corrected over rows, is equivalent"
    )
    alpha: float = Field(0.05, description="the family-wise error of a verdict")
    seeds: list[int] = Field(description="the seeds in the order runs take them: the experiment's, then added ones")
    first: int = Field(description="the seeds every run starts with")
    max_seeds: int | None = Field(None, description="sequential: the most seeds a run may have; None: fixed")
    spending: str = Field("pocock", description="how a sequential design spends alpha over its looks")
    declared_at: str | None = Field(
        None,
        description="when the margin was declared (ISO 8601), by the experiment's first run; None: before "
        "2026-11-27, when the first run did not record it",
    )
    seed_sd: float | None = Field(None, description="a seed sd (BLEU) borrowed for arms of one seed; None: none")
    seed_sd_df: float | None = Field(None, description="its degrees of freedom; None: taken as known")
    seed_sd_from: str | None = Field(None, description="where it was pooled: an experiment's name, or declared")


class Ratio(Record):
    """A run's speed over the baseline's, measured side by side: the geometric mean over rounds of the paired
    ratio, with its 95% t interval over rounds."""

    estimate: float
    low: float
    high: float
    rounds: int


class RunSpeed(Record):
    """One run of an experiment as `ablate bench` timed it on one machine (ablate.sweep.bench)."""

    run: str = Field(description="the run; in a learning-rate sweep the run before the rates (one rate timed for all)")
    config_hash: str
    precision: str = Field(description="what it computed in: fp32 or bf16 (`auto` resolved on this machine)")
    params: int
    updates: int = Field(description="the fixed updates a round trains (the first of the run's epoch 0)")
    tokens_per_update: float = Field(description="source and target tokens of an update, the mean over them")
    step_ms: float = Field(description="ms an update, forward, backward and optimizer: the median over rounds")
    tokens_per_s: float = Field(description="training tokens (source and target) a second: the median over rounds")
    gflop_per_target_token: float | None = None
    tflops_per_s: float | None = None
    mfu: float | None = None
    greedy_sentences_per_s: float | None = Field(None, description="greedy decoding of the slice: the median")
    beam_sentences_per_s: float | None = Field(None, description="beam search of the slice: the median")
    peak_memory_mib: float | None = Field(
        None,
        description="the most memory training and decoding the run took: on CUDA torch's max allocated; on a CPU "
        "the peak resident memory of a process forked for it (torch and the corpus included)",
    )
    rounds_tokens_per_s: list[float] = Field(default_factory=list, description="tokens_per_s of each timed round")
    ratio: Ratio | None = Field(None, description="tokens_per_s over the baseline's; None for the baseline")
    beam_ratio: Ratio | None = Field(None, description="beam_sentences_per_s over the baseline's")


class SpeedRecord(Record):
    """An experiment's speed.json (speed.cuda.json on a GPU): every run timed side by side on one machine by `ablate
    bench`, one run after another in each round, their order rotated every round, so that the machine's drift and
    its neighbours fall on every run alike."""

    experiment: str
    machine: str = Field(description="the GPU, or the CPU's model, vector ISA, bf16 and threads")
    device_type: str = Field(description="cpu or cuda")
    threads: int | None = None
    torch: str
    python: str
    host: str
    started_at: str
    seconds: float = Field(description="what the bench took, set-up included")
    rounds: int = Field(description="timed rounds, the warm-up round not counted")
    target: float = Field(description="the ratios' 95% interval half-width aimed at, relative: 0.03 is ±3%")
    reached: bool = Field(description="every ratio's interval within the target (else the rounds or time ran out)")
    core_share: float | None = Field(
        None,
        description="the share of the cores it computed on that other processes left it over the counted rounds, "
        "0 to 1 (ablate.train.device.CoreShare); absent: not measured (a bench before issue 76, or no /proc/stat)",
    )
    decode_split: str | None = None
    decode_sentences: int = 0
    decode_rounds: int | None = Field(
        None, description="timed rounds that decoded, the first ones (later rounds time updates alone); absent: all"
    )
    decode_lengths: str = Field(
        "forced to the source's length",
        description="how long each decoded sentence is: weights that are not trained would decode to the length "
        "limit, so every sentence ends at its source's length in tokens, whatever the run's weights",
    )
    weights: str = Field("initial", description="initial: the run's seeded initialisation; or trained")
    peak_tflops: float | None = None
    runs: list[RunSpeed]

    def run(self, name: str) -> RunSpeed | None:
        return next((r for r in self.runs if r.run == name), None)
