"""One job's work, in the worker, in named steps: prepare, train, average, validate, decode, score.

`Pipeline.run` reads top to bottom as the job goes. Where the job computes (device, precision, threads,
rank) is resolved once, by the worker (ablate.train.device.Placement). Every rank of a data-parallel job
trains; rank 0 alone logs, validates, decodes and scores. What it measures is returned as the fields of
result.json (ablate.record.RunResult), which ablate.train.worker validates and writes.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ablate.data.batches import batches as make_batches
from ablate.data.dataset import Dataset, load_dataset
from ablate.data.tokenizer import PAD
from ablate.model.diagnostics import fixed_batch, measure
from ablate.model.transformer import build_model, count_parameters
from ablate.record import EarlyStop, Status
from ablate.rundir import CHECKPOINT, checkpoint_step, read_diagnostics, read_metrics, truncate_metrics
from ablate.train import checkpoints, distributed
from ablate.train.bf16 import bf16_matmuls
from ablate.train.budgets import BudgetPoints
from ablate.train.device import CoreShare, Placement, device_name
from ablate.train.evaluation import decode, perplexity, score_tests, validate
from ablate.train.flops import FlopModel, cost
from ablate.train.job import Job
from ablate.train.log import Log
from ablate.train.trainer import Outcome, Progress, Trainer, autocast, validation_loss


def train_and_evaluate(job: Job, placement: Placement, stop: Callable[[], bool],
                       started: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Trains the job (resuming from its checkpoint), evaluates it, and returns result.json's fields, `wall_seconds`
    among them: since `started` (perf_counter; default now), with what earlier processes of the job took. Every
    matmul of the job, training's, validation's and beam search's, goes through `bf16_matmuls`: in bf16 on a CPU
    without native bf16, fp32 kernels compute it as a native bf16 kernel would (ablate.train.bf16)."""
    with bf16_matmuls(placement.device, placement.precision):
        pipeline = Pipeline(job, placement, stop, started)
        fields = pipeline.run()
        if fields["status"] != Status.INTERRUPTED:  # the resumed run measures its wall time
            fields["wall_seconds"] = round(pipeline.wall(), 1)
        return fields


class Pipeline:
    """One job from its spec to its scores. Each step is a method; `run` calls them in order."""

    def __init__(self, job: Job, placement: Placement, stop: Callable[[], bool], started: float | None = None):
        self.job, self.at, self.stop = job, placement, stop
        self.spec = job.run_spec()
        self.rank0 = placement.rank == 0
        self.amp = autocast(placement.device, placement.precision)
        self.started = time.perf_counter() if started is None else started
        self.earlier_wall = 0.0  # what the job's earlier processes took, from its checkpoint

    def run(self) -> dict[str, Any]:
        fields = self.prepare()
        outcome = self.train()
        fields |= self.training_fields(outcome)
        if outcome.status == Status.INTERRUPTED:
            return fields  # no result.json: the resumed run measures what training cost
        fields |= self.cost()
        if outcome.stopped_by is not None:
            fields["stopped_by"] = outcome.stopped_by
        if outcome.status == Status.DIVERGED:
            return fields | {"error": outcome.reason, "peak_memory_mib": peak_memory_mib(self.at.device)}
        if self.saving and self.resumed != outcome.steps:  # a kill while decoding resumes at evaluation
            # the end's weights are averaged with the rest; epoch checkpoints average whole passes alone (fairseq's
            # --num-epoch-checkpoints), so a run that ends mid-pass keeps none of its partial pass
            whole = self.spec.training.checkpoint_every != "epoch" or self.trainer.checkpoint_due()
            self.save(self.job.directory, self.trainer, whole)
        if not self.rank0:
            return fields  # decoding and scoring are rank 0's
        fields |= self.finish(fields)
        self.log.close()
        return fields | {"peak_memory_mib": peak_memory_mib(self.at.device)}

    # -- prepare ---------------------------------------------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        """The data, the model, the trainer (from the checkpoint, if any) and the log; the run's first fields."""
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
        fields: dict[str, Any] = {
            "params": count_parameters(self.model), "device": device_name(at.device), "gpus": job.gpus,
            "processes": at.world, "precision": at.precision, "src_vocab": vocab[0], "tgt_vocab": vocab[1],
            "train_pairs": len(self.data.train),
        }  # fmt: skip
        if self.resumed is not None:
            fields["resumed_from_step"] = self.resumed
        if self.rank0:
            fields["init_valid_loss"] = self.initial_loss()
            if self.resumed is None:
                self.diagnose(0)  # at initialisation, before the first update, where Xiong et al. measure
        return fields

    def resume(self) -> int | None:
        """The trainer restored from the run's last checkpoint; its step, or None when the run starts afresh."""
        resumed = checkpoint_step(self.job.directory, self.job.config_hash)
        if resumed is not None:
            state = checkpoints.load(self.job.directory / CHECKPOINT, self.at.device)
            self.trainer.load_state_dict(state)
            self.earlier_wall = state.get("wall_seconds", 0.0)
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
            return next((r["valid_loss"] for r in read_metrics(self.job.directory)
                         if r.get("step") == 0 and "valid_loss" in r), None)  # fmt: skip
        loss = validation_loss(self.model, self.valid_batches, self.at.device, self.amp)
        self.log.write({"step": 0, "valid_loss": round(loss, 4), "valid_ppl": perplexity(loss), "wall_s": 0.0})
        return round(loss, 4)

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
        self.log.write({"step": p.step, "epoch": p.epoch, "loss": round(p.loss, 4), "lr": p.lr,
                        "step_ms": round(p.step_seconds * 1000, 1), "src_tokens": p.src_tokens,
                        "tgt_tokens": p.tgt_tokens, "wall_s": self.wall()})  # fmt: skip
        self.log.progress(p, self.spec.training.max_steps)
        every = self.spec.training.diagnostics_every
        if every and p.step % every == 0:
            self.diagnose(p.step)

    def on_validate(self, step: int) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self.rank0:
            record = self.validate(step)
            self.log.write(record | {"wall_s": self.wall()})
            if self.spec.training.diagnostics_every is None:
                self.diagnose(step)
        distributed.barrier()
        return record

    def on_checkpoint(self, step: int) -> None:
        self.save(self.job.directory, self.trainer, self.trainer.checkpoint_due())

    def save(self, directory: Path, which: Trainer, weights: bool) -> None:
        """`which` (the run, or a budget point's branch) checkpointed in `directory`; `weights`: kept to average."""
        if self.rank0:
            state = which.state_dict() | {"wall_seconds": self.wall()}
            checkpoints.save(directory, state, which.step, self.job.config_hash,
                             self.spec.evaluation.average_checkpoints, weights, self.best_step())  # fmt: skip
        distributed.barrier()

    def best_step(self) -> int | None:
        """With `evaluation.select: best`, the best validation step so far (training.early_stopping's); else None."""
        watch = self.trainer.watch
        return watch.best_step if watch is not None and self.spec.evaluation.select == "best" else None

    def diagnose(self, step: int) -> None:
        """Rank 0's diagnostics of the model as it is at `step` (ablate.model.diagnostics), logged."""
        if self.rank0 and self.spec.training.diagnostics_every != 0:
            measured = measure(self.model, self.probe_batch, self.spec.training.label_smoothing, self.amp)
            self.log.diagnostics({"step": step} | measured)

    def branch_log(self, directory: Path, resumed_at: int | None) -> Callable[[Progress], None]:
        """A cooldown branch's own metrics.jsonl and progress lines."""
        branch = Log(directory if self.rank0 else None, None, resumed_at)
        if self.rank0:
            directory.mkdir(parents=True, exist_ok=True)
            truncate_metrics(directory, resumed_at)
            self.log.phase(f"budget point {directory.name}: cooling down from step {self.trainer.step}")

        def on_branch_step(p: Progress) -> None:
            branch.write({"step": p.step, "loss": round(p.loss, 4), "lr": p.lr,
                          "step_ms": round(p.step_seconds * 1000, 1), "wall_s": self.wall()})  # fmt: skip
            branch.progress(p, None)

        return on_branch_step

    def training_fields(self, outcome: Outcome) -> dict[str, Any]:
        """How training ended and how fast it went: step_ms from the steps after the first of each process (which
        pays for warm-up), tokens a second over every step."""
        totals = self.trainer.totals
        fields: dict[str, Any] = {}
        if self.share is not None:  # the speed figures are the run's own only when it had its cores to itself
            fields |= {"threads": torch.get_num_threads(), "cpu_ids": self.share.cores,
                       "core_share": self.share.stop()}  # fmt: skip
        timed = totals.timed_seconds / totals.timed_steps if totals.timed_steps else totals.step_seconds / outcome.steps
        if self.trainer.graphs is not None:
            fields["cuda_graphs"] = len(self.trainer.graphs)
        watch = self.trainer.watch
        if watch is not None:
            fields["early_stopping"] = EarlyStop(metric=watch.metric, stopped=outcome.stopped_early,
                                                 best_step=watch.best_step, best=watch.best,
                                                 validations_since_best=watch.since_best).dump()  # fmt: skip
        return fields | {
            "status": outcome.status, "steps": outcome.steps, "epochs": round(outcome.epochs, 2),
            "train_seconds": round(totals.train_seconds, 1),
            "train_src_tokens_per_s": round(totals.src_tokens / totals.step_seconds, 1),
            "train_tgt_tokens_per_s": round(totals.tgt_tokens / totals.step_seconds, 1),
            "step_ms": round(1000 * timed, 1),
        }  # fmt: skip

    def cost(self) -> dict[str, Any]:
        """What training cost (ablate.train.flops.cost), and what measuring the diagnostics took of it."""
        fields: dict[str, Any] = {}
        if self.rank0 and self.spec.training.diagnostics_every != 0:
            seconds = sum(r.get("seconds", 0.0) for r in read_diagnostics(self.job.directory))
            fields["diagnostics_seconds"] = round(seconds, 2)
        totals, training = self.trainer.totals, self.spec.training
        spent = cost(totals.flops, totals.step_seconds, totals.tgt_tokens, training.budgets(), training.peak_tflops,
                     self.at)  # fmt: skip
        return fields | spent.dump()

    # -- average, validate, decode, score --------------------------------------------------------------------------

    def evaluate(self, weights_dir: Path, out_dir: Path, step: int) -> dict[str, Any]:
        """Rank 0 scores the model as a run ending at `step`: the mean of the last checkpoints kept in
        `weights_dir`, validated, then every test split decoded into `out_dir` and scored."""
        record = self.average(weights_dir)
        final = self.validate(step)
        record |= {"valid_loss": final["valid_loss"], "valid_ppl": final["valid_ppl"]}
        if "valid_bleu" in final:
            record["valid_bleu"] = final["valid_bleu"]
        translations = decode(self.model, self.data, self.spec.evaluation, self.at.device, self.amp, out_dir,
                              self.log)  # fmt: skip
        return record | score_tests(self.data, translations, self.spec.evaluation)

    def average(self, weights_dir: Path) -> dict[str, Any]:
        """Loads the mean of the last `evaluation.average_checkpoints` checkpoints into the model (with `select:
        best`, the last up to the best validation step); their steps."""
        n, best = self.spec.evaluation.average_checkpoints, self.best_step()
        if n <= 1 and best is None:
            return {}
        weights, steps = checkpoints.averaged_weights(weights_dir, n, self.at.device, until=best)
        self.model.load_state_dict(weights)
        if n == 1:
            self.log.say(f"scoring the weights of the best validation, step {best}")
        else:
            self.log.say(f"averaged the checkpoints of steps {', '.join(map(str, steps))}")
        return {"averaged_steps": steps}

    def validate(self, step: int) -> dict[str, Any]:
        training = self.spec.training
        return validate(self.model, self.data, self.valid_batches, self.spec.evaluation, training.valid_bleu_pairs,
                        self.at.device, self.amp, step)  # fmt: skip

    def finish(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The run's end evaluated (its validation logged), and with budget points, every point's record with the
        end's last (`fields`: what the run measured so far)."""
        steps = fields["steps"]
        end = self.evaluate(self.job.directory, self.job.directory, steps)
        validation = {"step": steps, "valid_loss": end["valid_loss"], "valid_ppl": end["valid_ppl"]}
        if "valid_bleu" in end:
            validation["valid_bleu"] = end.pop("valid_bleu")
        if "averaged_steps" in end:
            validation["averaged"] = len(end["averaged_steps"])  # the validation of the model that is decoded
        self.log.write(validation | {"wall_s": self.wall()})
        if self.points.points:
            end |= self.points.summary(fields | end)
        return end


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
