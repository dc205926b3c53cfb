"""One job's work, in the worker, in named steps: prepare, train, average, validate, decode, score.

`Pipeline.run` reads top to bottom as the job goes. Where the job computes (device, precision, threads,
rank) is resolved once, by the worker (ablate.train.device.Placement). Every rank of a data-parallel job
trains; rank 0 alone logs, validates, decodes and scores. What it measures is returned as the pieces of
result.json (ablate.record: Setup, Training, Cost, Evaluation, Points, Footprint), which ablate.train.worker
puts together and writes.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ablate.data.batches import batches as make_batches
from ablate.data.dataset import Dataset, load_dataset
from ablate.data.tokenizer import PAD
from ablate.model.diagnostics import fixed_batch, measure
from ablate.model.transformer import build_model, count_parameters
from ablate.record import (
    Cost,
    EarlyStop,
    Ending,
    Evaluation,
    Footprint,
    Points,
    Record,
    Setup,
    Status,
    Step,
    Training,
    Validation,
)
from ablate.rundir import diagnostics_seconds, last_checkpoint, read_validations, truncate_metrics
from ablate.train import checkpoints, distributed
from ablate.train.bf16 import bf16_matmuls
from ablate.train.budgets import BudgetPoints
from ablate.train.device import CoreShare, Placement, device_name
from ablate.train.evaluation import decode, keep_statistics, perplexity, score_tests, validate
from ablate.train.flops import FlopModel, cost
from ablate.train.job import Job
from ablate.train.log import Log
from ablate.train.steps import Outcome, Progress
from ablate.train.trainer import Trainer, autocast, validation_loss


@dataclass
class Measured:
    """What one process of a job measured: pieces of its result.json, those it got to (an interrupted job: its
    status alone, since the resumed run measures what training cost; a rank other than 0: no scores)."""

    ending: Ending
    setup: Setup | None = None
    training: Training | None = None
    cost: Cost | None = None
    evaluation: Evaluation | None = None
    points: Points | None = None
    footprint: Footprint = field(default_factory=Footprint)

    def pieces(self) -> list[Record]:
        every = (self.ending, self.setup, self.training, self.cost, self.evaluation, self.points, self.footprint)
        return [piece for piece in every if piece is not None]


def train_and_evaluate(job: Job, placement: Placement, stop: Callable[[], bool],
                       started: float | None = None) -> Measured:  # fmt: skip
    """Trains the job (resuming from its checkpoint), evaluates it, and returns what it measured, its wall seconds
    among them: since `started` (perf_counter; default now), with what earlier processes of the job took. Every
    matmul of the job, training's, validation's and beam search's, goes through `bf16_matmuls`: in bf16 on a CPU
    without native bf16, fp32 kernels compute it as a native bf16 kernel would (ablate.train.bf16)."""
    with bf16_matmuls(placement.device, placement.precision):
        pipeline = Pipeline(job, placement, stop, started)
        measured = pipeline.run()
        if measured.ending.status != Status.INTERRUPTED:  # the resumed run measures its wall time
            measured.footprint = Footprint.of(measured.footprint, wall_seconds=round(pipeline.wall(), 1))
        return measured


class Pipeline:
    """One job from its spec to its scores. Each step is a method; `run` calls them in order."""

    def __init__(self, job: Job, placement: Placement, stop: Callable[[], bool], started: float | None = None):
        self.job, self.at, self.stop = job, placement, stop
        self.spec = job.run_spec()
        self.rank0 = placement.rank == 0
        self.amp = autocast(placement.device, placement.precision)
        self.started = time.perf_counter() if started is None else started
        self.earlier_wall = 0.0  # what the job's earlier processes took, from its checkpoint

    def run(self) -> Measured:
        setup = self.prepare()
        outcome = self.train()
        if outcome.status == Status.INTERRUPTED:
            return Measured(Ending(status=outcome.status))  # no result.json: the resumed run measures the cost
        measured = Measured(Ending(status=outcome.status), setup, self.training(outcome), self.cost())
        if outcome.status == Status.DIVERGED:
            measured.ending = Ending(status=outcome.status, error=outcome.reason)
            measured.footprint = Footprint(peak_memory_mib=peak_memory_mib(self.at.device))
            return measured
        if self.saving and self.resumed != outcome.steps:  # a kill while decoding resumes at evaluation
            # the end's weights are averaged with the rest; epoch checkpoints average whole passes alone (fairseq's
            # --num-epoch-checkpoints), so a run that ends mid-pass keeps none of its partial pass
            whole = self.spec.training.checkpoint_every != "epoch" or self.trainer.checkpoint_due()
            self.save(self.job.directory, self.trainer, whole)
        if not self.rank0:
            return measured  # decoding and scoring are rank 0's
        measured.evaluation, measured.points = self.finish(measured)
        self.log.close()
        measured.footprint = Footprint(peak_memory_mib=peak_memory_mib(self.at.device))
        return measured

    # -- prepare ---------------------------------------------------------------------------------------------------

    def prepare(self) -> Setup:
        """The data, the model, the trainer (from the checkpoint, if any) and the log; what was prepared."""
        spec, job, at = self.spec, self.job, self.at
        self.data: Dataset = load_dataset(spec.data, spec.tokenizer)
        at.enter()
        torch.manual_seed(job.seed)
        vocab = (len(self.data.src_vocab), len(self.data.tgt_vocab))
        self.model = build_model(spec.model, *vocab, pad_id=PAD).to(at.device)
        flop_model = FlopModel.cached(self.model, spec.model.model_dump_json(), vocab, at.device)
        reset_peak_memory(at.device)
        self.trainer = Trainer(self.model, spec.training, spec.model.d_model, at)
        self.trainer.flop_model = flop_model
        self.resumed = self.resume()
        self.log = Log(job.directory if self.rank0 else None, job.tensorboard if self.rank0 else None, self.resumed)
        self.valid_batches = make_batches(self.data.valid, spec.training.max_tokens)
        self.probe_batch = fixed_batch(self.data.valid, spec.training.max_tokens)
        self.saving = spec.training.checkpoint_every is not None
        setup = Setup(params=count_parameters(self.model), device=device_name(at.device), gpus=job.gpus,
                      processes=at.world, precision=at.precision, src_vocab=vocab[0], tgt_vocab=vocab[1],
                      train_pairs=len(self.data.train))  # fmt: skip
        if self.resumed is not None:
            setup.resumed_from_step = self.resumed
        if self.rank0:
            setup.init_valid_loss = self.initial_loss()
            if self.resumed is None:
                self.diagnose(0)  # at initialisation, before the first update, where Xiong et al. measure
        return setup

    def resume(self) -> int | None:
        """The trainer restored from the run's last checkpoint; its step, or None when the run starts afresh."""
        found = last_checkpoint(self.job.directory, self.job.config_hash)
        resumed = None if found is None else found.step
        if found is not None:
            state = checkpoints.load_state(found, self.at.device)
            self.trainer.load_state_dict(state)
            self.earlier_wall = checkpoints.wall_seconds(state)
            if self.rank0:
                checkpoints.forget_after(self.job.directory, resumed)
        if self.rank0:
            truncate_metrics(self.job.directory, resumed)
        return resumed

    def initial_loss(self) -> float | None:
        """Validation loss before the first update (step 0 of the curves; the cap of learning-rate sensitivity).

        Taken in eval mode, it draws no random numbers: training is what it would be without it. A resumed
        run reads it back from its log.
        """
        if self.resumed is not None:
            return next((v.valid_loss for v in read_validations(self.job.directory) if v.step == 0), None)
        loss = validation_loss(self.model, self.valid_batches, self.at.device, self.amp)
        initial = Validation(step=0, valid_loss=round(loss, 4), valid_ppl=perplexity(loss))
        self.log.write(Validation.of(initial, wall_s=0.0).dump())
        return initial.valid_loss

    # -- train -----------------------------------------------------------------------------------------------------

    def train(self) -> Outcome:
        """Trains to the budget, validating, checkpointing and scoring the budget points on the way."""
        points = BudgetPoints(self.spec.evaluation.budgets, self.spec.training, self.job.directory,
                              self.job.config_hash, self.at.rank)  # fmt: skip
        if self.resumed is None:
            points.forget()
        self.points = points
        save = self.save if self.saving else None
        before_update = points.hook(self.trainer, self.data.train, save, self.evaluate, self.branch_log, self.stop)
        self.share = CoreShare(self.job.cpu_ids) if self.at.device.type == "cpu" else None
        on_checkpoint = self.on_checkpoint if self.saving else None
        outcome = self.trainer.fit(self.data.train, self.on_step, self.on_validate, on_checkpoint, self.stop,
                                   before_update)  # fmt: skip
        if outcome.status != Status.INTERRUPTED and self.log.last_diagnosed != outcome.steps:
            self.diagnose(outcome.steps)  # the trained model, before any checkpoint averaging; a diverged one too
        return outcome

    def wall(self) -> float:
        """Seconds since the job first started, across restarts: the x axis of the learning curves."""
        return round(self.earlier_wall + time.perf_counter() - self.started, 2)

    def on_step(self, p: Progress) -> None:
        self.log.write(Step(step=p.step, epoch=p.epoch, loss=round(p.loss, 4), lr=p.lr,
                            step_ms=round(p.step_seconds * 1000, 1), src_tokens=p.src_tokens,
                            tgt_tokens=p.tgt_tokens, wall_s=self.wall()).dump())  # fmt: skip
        self.log.progress(p, self.spec.training.max_steps)
        every = self.spec.training.diagnostics_every
        if every and p.step % every == 0:
            self.diagnose(p.step)

    def on_validate(self, step: int) -> Validation | None:
        record = None
        if self.rank0:
            record = self.validate(step)
            self.log.write(Validation.of(record, wall_s=self.wall()).dump())
            if self.spec.training.diagnostics_every is None:
                self.diagnose(step)
        distributed.barrier()
        return record

    def on_checkpoint(self, step: int) -> None:
        self.save(self.job.directory, self.trainer, self.trainer.checkpoint_due())

    def save(self, directory: Path, which: Trainer, weights: bool) -> None:
        """`which` (the run, or a budget point's branch) checkpointed in `directory`; `weights`: kept to average."""
        if self.rank0:
            checkpoints.save(directory, which.state_dict(), which.step, self.job.config_hash,
                             self.spec.evaluation.average_checkpoints, weights, self.best_step(),
                             wall=self.wall())  # fmt: skip
        distributed.barrier()

    def best_step(self) -> int | None:
        """With `evaluation.select: best`, the best validation step so far (training.early_stopping's); else None."""
        watch = self.trainer.watch
        return watch.best_step if watch is not None and self.spec.evaluation.select == "best" else None

    def diagnose(self, step: int) -> None:
        """Rank 0's diagnostics of the model as it is at `step` (ablate.model.diagnostics), logged."""
        if self.rank0 and self.spec.training.diagnostics_every != 0:
            measured = measure(self.model, self.probe_batch, self.spec.training.label_smoothing, self.amp)
            self.log.diagnostics(step, measured)

    def branch_log(self, directory: Path, resumed_at: int | None) -> Callable[[Progress], None]:
        """A cooldown branch's own metrics.jsonl and progress lines."""
        branch = Log(directory if self.rank0 else None, None, resumed_at)
        if self.rank0:
            directory.mkdir(parents=True, exist_ok=True)
            truncate_metrics(directory, resumed_at)
            self.log.phase(f"budget point {directory.name}: cooling down from step {self.trainer.step}")

        def on_branch_step(p: Progress) -> None:
            branch.write(Step(step=p.step, loss=round(p.loss, 4), lr=p.lr, step_ms=round(p.step_seconds * 1000, 1),
                              wall_s=self.wall()).dump())  # fmt: skip
            branch.progress(p, None)

        return on_branch_step

    def training(self, outcome: Outcome) -> Training:
        """How training ended and how fast it went: step_ms from the steps after the first of each process (which
        pays for warm-up), tokens a second over every step; and what measuring the diagnostics took of it."""
        totals = self.trainer.totals
        timed = totals.timed_seconds / totals.timed_steps if totals.timed_steps else totals.step_seconds / outcome.steps
        training = Training(steps=outcome.steps, epochs=round(outcome.epochs, 2),
                            train_seconds=round(totals.train_seconds, 1),
                            train_src_tokens_per_s=round(totals.src_tokens / totals.step_seconds, 1),
                            train_tgt_tokens_per_s=round(totals.tgt_tokens / totals.step_seconds, 1),
                            step_ms=round(1000 * timed, 1))  # fmt: skip
        if self.share is not None:  # the speed figures are the run's own only when it had its cores to itself
            training.threads, training.cpu_ids = torch.get_num_threads(), self.share.cores
            training.core_share = self.share.stop()
        if self.trainer.graphs is not None:
            training.cuda_graphs = len(self.trainer.graphs)
        watch = self.trainer.watch
        if watch is not None:
            training.early_stopping = EarlyStop(metric=watch.metric, stopped=outcome.stopped_early,
                                                best_step=watch.best_step, best=watch.best,
                                                validations_since_best=watch.since_best)  # fmt: skip
        if self.rank0 and self.spec.training.diagnostics_every != 0:
            training.diagnostics_seconds = round(diagnostics_seconds(self.job.directory), 2)
        if outcome.stopped_by is not None:
            training.stopped_by = outcome.stopped_by
        return training

    def cost(self) -> Cost:
        """What training cost (ablate.train.flops.cost)."""
        totals, training = self.trainer.totals, self.spec.training
        return cost(totals.flops, totals.step_seconds, totals.tgt_tokens, training.budgets(), training.peak_tflops,
                    self.at)  # fmt: skip

    # -- average, validate, decode, score --------------------------------------------------------------------------

    def evaluate(self, weights_dir: Path, out_dir: Path, step: int) -> tuple[Evaluation, Validation]:
        """Rank 0 scores the model as a run ending at `step`: the mean of the last checkpoints kept in
        `weights_dir`, validated, then every test split decoded into `out_dir` and scored."""
        averaged = self.average(weights_dir)
        validation = self.validate(step)
        translations = decode(self.model, self.data, self.spec.evaluation, self.at.device, self.amp, out_dir,
                              self.log)  # fmt: skip
        evaluation = score_tests(self.data, translations, self.spec.evaluation)
        keep_statistics(self.data, translations, self.spec.evaluation, out_dir)
        evaluation.valid_loss, evaluation.valid_ppl = validation.valid_loss, validation.valid_ppl
        if averaged is not None:
            evaluation.averaged_steps = averaged
        return evaluation, validation

    def average(self, weights_dir: Path) -> list[int] | None:
        """Loads the mean of the last `evaluation.average_checkpoints` checkpoints into the model (with `select:
        best`, the last up to the best validation step); their steps, or None where the last weights are scored."""
        n, best = self.spec.evaluation.average_checkpoints, self.best_step()
        if n <= 1 and best is None:
            return None
        weights, steps = checkpoints.averaged_weights(weights_dir, n, self.at.device, until=best)
        self.model.load_state_dict(weights)
        if n == 1:
            self.log.say(f"scoring the weights of the best validation, step {best}")
        else:
            self.log.say(f"averaged the checkpoints of steps {', '.join(map(str, steps))}")
        return steps

    def validate(self, step: int) -> Validation:
        training = self.spec.training
        return validate(self.model, self.data, self.valid_batches, self.spec.evaluation, training.valid_bleu_pairs,
                        self.at.device, self.amp, step)  # fmt: skip

    def finish(self, measured: Measured) -> tuple[Evaluation, Points | None]:
        """The run's end evaluated (its validation logged), and with budget points, every point's record with the
        end's last (`measured`: what the run measured so far)."""
        training, cost = measured.training, measured.cost
        assert training is not None and training.steps is not None and cost is not None
        end, validation = self.evaluate(self.job.directory, self.job.directory, training.steps)
        if end.averaged_steps is not None:
            validation.averaged = len(end.averaged_steps)  # the validation of the model that is decoded
        validation.wall_s = self.wall()
        self.log.write(validation.dump())
        if not self.points.points:
            return end, None
        return end, self.points.summary(training, cost, end)


def reset_peak_memory(device: torch.device) -> None:
    """Starts the run's peak-memory count: CUDA's allocator statistics, or the process's peak RSS (Linux)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):  # not Linux: the peak since the process started is reported
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident set size


def peak_memory_mib(device: torch.device) -> float:
    """On CUDA torch's max allocated; on CPU the process's peak resident memory since the reset."""
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
