"""One job's work, in the worker: train (resuming from its checkpoint), average, validate, decode, score.

Every rank of a data-parallel job trains; rank 0 alone logs, validates, decodes and scores. What it
measures is returned as the fields of result.json (ablate.worker writes it).
"""

from __future__ import annotations

import contextlib
import math
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ablate.data.batches import batches as make_batches
from ablate.data.dataset import Dataset, load_dataset
from ablate.data.tokenizer import PAD
from ablate.files import write_text
from ablate.model.diagnostics import fixed_batch, measure
from ablate.model.transformer import build_model, count_parameters
from ablate.rundir import (
    CHECKPOINT,
    DIAGNOSTICS,
    Status,
    append_metrics,
    checkpoint_step,
    hypotheses_path,
    read_diagnostics,
    read_metrics,
    truncate_metrics,
)
from ablate.train import checkpoints, distributed
from ablate.train.budgets import BudgetPoints
from ablate.train.device import CoreShare, device_name
from ablate.train.evaluation import by_length, score, translate
from ablate.train.flops import FlopModel, peak_flops
from ablate.train.job import Job
from ablate.train.trainer import Progress, Trainer, autocast, precision_name, validation_loss


def train_and_evaluate(job: Job, rank: int, world: int, local_rank: int, stop) -> dict[str, Any]:
    spec = job.run_spec()
    data: Dataset = load_dataset(spec.data, spec.tokenizer)
    device = torch.device(f"cuda:{local_rank}" if job.device == "cuda" else "cpu")
    if job.threads is not None:
        torch.set_num_threads(job.threads)  # kernels, hence round-off, depend on it: references pin it
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(job.seed)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD).to(device)
    flop_model = FlopModel.cached(
        model, spec.model.model_dump_json(), (len(data.src_vocab), len(data.tgt_vocab)), device
    )
    reset_peak_memory(device)
    trainer = Trainer(model, spec.training, spec.model.d_model, device, rank, world)
    trainer.flop_model = flop_model
    resumed = checkpoint_step(job.directory, job.config_hash)
    earlier_wall = 0.0
    if resumed is not None:
        state = checkpoints.load(job.directory / CHECKPOINT, device)
        trainer.load_state_dict(state)
        earlier_wall = state.get("wall_seconds", 0.0)
        if rank == 0:
            checkpoints.forget_after(job.directory, resumed)
    if rank == 0:
        truncate_metrics(job.directory, resumed)
    started = time.perf_counter()

    def wall() -> float:
        """Seconds since the job first started, across restarts: the x axis of the learning curves."""
        return round(earlier_wall + time.perf_counter() - started, 2)

    out: dict[str, Any] = {
        "params": count_parameters(model), "device": device_name(device), "gpus": job.gpus, "processes": world,
        "precision": precision_name(device, spec.training.precision), "src_vocab": len(data.src_vocab),
        "tgt_vocab": len(data.tgt_vocab), "train_pairs": len(data.train),
    }  # fmt: skip
    if resumed is not None:
        out["resumed_from_step"] = resumed
    log = Log(job.directory if rank == 0 else None, job.tensorboard if rank == 0 else None, resumed)
    valid_batches = make_batches(data.valid, spec.training.max_tokens)
    every = spec.training.diagnostics_every  # None: at each validation; 0: never
    probe_batch = fixed_batch(data.valid, spec.training.max_tokens)

    def diagnose(step: int) -> None:
        """Rank 0's diagnostics of the model as it is at `step` (ablate.model.diagnostics), logged."""
        if rank == 0 and every != 0:
            amp = autocast(device, spec.training.precision)
            log.diagnostics({"step": step} | measure(model, probe_batch, spec.training.label_smoothing, amp))

    if rank == 0:
        out["init_valid_loss"] = initial_loss(model, valid_batches, spec, device, job.directory, log, resumed)
        if resumed is None:
            diagnose(0)  # at initialisation, before the first update, where Xiong et al. measure

    def on_step(p: Progress) -> None:
        log.write({"step": p.step, "epoch": p.epoch, "loss": round(p.loss, 4), "lr": p.lr,
                   "step_ms": round(p.step_seconds * 1000, 1), "src_tokens": p.src_tokens,
                   "tgt_tokens": p.tgt_tokens, "wall_s": wall()})  # fmt: skip
        log.progress(p, spec.training.max_steps)
        if every and p.step % every == 0:
            diagnose(p.step)

    def on_validate(step: int) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if rank == 0:
            record = validate(model, data, valid_batches, spec, device, step)
            log.write(record | {"wall_s": wall()})
            if every is None:
                diagnose(step)
        distributed.barrier()
        return record

    def save(directory: Path, which: Trainer, weights: bool) -> None:
        """`which` (the run, or a budget point's branch) checkpointed in `directory`; `weights`: kept to average."""
        if rank == 0:
            state = which.state_dict() | {"wall_seconds": wall()}
            checkpoints.save(directory, state, which.step, job.config_hash, spec.evaluation.average_checkpoints,
                             weights)  # fmt: skip
        distributed.barrier()

    def on_checkpoint(step: int) -> None:
        save(job.directory, trainer, step % (spec.training.checkpoint_every or 1) == 0)

    def evaluate(weights_dir: Path, out_dir: Path, step: int) -> dict[str, Any]:
        """Rank 0 scores the model as a run ending at `step`: the mean of the last checkpoints kept in
        `weights_dir`, validated, then every test split decoded into `out_dir` and scored."""
        record: dict[str, Any] = {}
        if spec.evaluation.average_checkpoints > 1:
            weights, steps = checkpoints.averaged_weights(weights_dir, spec.evaluation.average_checkpoints, device)
            model.load_state_dict(weights)
            record["averaged_steps"] = steps
            log.say(f"averaged the checkpoints of steps {', '.join(map(str, steps))}")
        final = validate(model, data, valid_batches, spec, device, step)
        record |= {"valid_loss": final["valid_loss"], "valid_ppl": final["valid_ppl"]}
        if "valid_bleu" in final:
            record["valid_bleu"] = final["valid_bleu"]
        return record | decode_and_score(model, data, spec, device, out_dir, log)

    def branch_log(directory: Path, resumed_at: int | None) -> Callable[[Progress], None]:
        """A cooldown branch's own metrics.jsonl and progress lines."""
        branch = Log(directory if rank == 0 else None, None, resumed_at)
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            truncate_metrics(directory, resumed_at)
            log.say(f"budget point {directory.name}: cooling down from step {trainer.step}")
            log.write({"phase": f"budget point {directory.name}: cooling down from step {trainer.step}"})

        def on_branch_step(p: Progress) -> None:
            branch.write({"step": p.step, "loss": round(p.loss, 4), "lr": p.lr,
                          "step_ms": round(p.step_seconds * 1000, 1), "wall_s": wall()})  # fmt: skip
            branch.progress(p, None)

        return on_branch_step

    saving = spec.training.checkpoint_every is not None
    points = BudgetPoints(spec.evaluation.budgets, spec.training, job.directory, job.config_hash, rank)
    if resumed is None:
        points.forget()
    before_update = points.hook(trainer, data.train, save if saving else None, evaluate, branch_log, stop)
    share = CoreShare(job.cpu_ids) if device.type == "cpu" else None
    outcome = trainer.fit(data.train, on_step, on_validate, on_checkpoint if saving else None, stop, before_update)
    if share is not None:  # the speed figures are the run's own only when it had its cores to itself
        out |= {"threads": torch.get_num_threads(), "cpu_ids": share.cores, "core_share": share.stop()}
    if outcome.status != Status.INTERRUPTED and log.last_diagnosed != outcome.steps:
        diagnose(outcome.steps)  # the trained model, before any checkpoint averaging; a diverged one too
    totals = trainer.totals
    timed = totals.timed_seconds / totals.timed_steps if totals.timed_steps else totals.step_seconds / outcome.steps
    out |= {
        "status": outcome.status, "steps": outcome.steps, "epochs": round(outcome.epochs, 2),
        "train_seconds": round(totals.train_seconds, 1),
        "train_src_tokens_per_s": round(totals.src_tokens / totals.step_seconds, 1),
        "train_tgt_tokens_per_s": round(totals.tgt_tokens / totals.step_seconds, 1),
        "step_ms": round(1000 * timed, 1), "earlier_wall_seconds": earlier_wall,
    }  # fmt: skip
    if outcome.status == Status.INTERRUPTED:
        return out  # no result.json: the resumed run measures what training cost
    if rank == 0 and every != 0:
        out["diagnostics_seconds"] = round(sum(r.get("seconds", 0.0) for r in read_diagnostics(job.directory)), 2)
    out |= compute(trainer, spec.training, device, world, job.threads)
    if outcome.status == Status.DIVERGED:
        return out | {"error": outcome.reason, "peak_memory_mib": peak_memory_mib(device)}
    if saving and resumed != outcome.steps:  # a kill while decoding resumes at evaluation
        save(job.directory, trainer, True)
    if rank != 0:
        return out  # decoding and scoring are rank 0's
    end = evaluate(job.directory, job.directory, outcome.steps)
    validation = {"step": outcome.steps, "valid_loss": end["valid_loss"], "valid_ppl": end["valid_ppl"]}
    if "valid_bleu" in end:
        validation["valid_bleu"] = end.pop("valid_bleu")
    if "averaged_steps" in end:
        validation["averaged"] = len(end["averaged_steps"])  # the validation of the model that is decoded
    log.write(validation | {"wall_s": wall()})
    out |= end
    if points.points:
        out |= budget_summary(points, out)
    log.close()
    return out | {"peak_memory_mib": peak_memory_mib(device)}


def budget_summary(points: BudgetPoints, out: dict[str, Any]) -> dict[str, Any]:
    """result.json's `budget_points` (every point, the end last) and what the cooldown branches cost."""
    end = {
        "budget": points.points[-1],
        "step": out["steps"],
        "epochs": out["epochs"],
        "train_target_tokens": out["train_target_tokens"],
        "train_flops": out["train_flops"],
        "status": "completed",
    }
    end |= {
        k: out[k] for k in ("averaged_steps", "valid_loss", "valid_ppl", "scores", "decode_sentences_per_s") if k in out
    }
    records = points.records(end)
    branches = [r["branch"] for r in records if "branch" in r]
    summary: dict[str, Any] = {"budget_points": records}
    if branches:
        summary |= {"branch_steps": sum(b["steps"] for b in branches),
                    "branch_seconds": round(sum(b["seconds"] for b in branches), 1)}  # fmt: skip
    return summary


def initial_loss(model, valid_batches: list, spec, device: torch.device, directory: Path, log: Log,
                 resumed: int | None) -> float | None:  # fmt: skip
    """Validation loss before the first update (step 0 of the curves; the cap of learning-rate sensitivity).

    Taken in eval mode, it draws no random numbers: training is what it would be without it. A resumed
    run reads it back from its log.
    """
    if resumed is not None:
        return next((r["valid_loss"] for r in read_metrics(directory) if r.get("step") == 0 and "valid_loss" in r),
                    None)  # fmt: skip
    loss = validation_loss(model, valid_batches, device, autocast(device, spec.training.precision))
    log.write({"step": 0, "valid_loss": round(loss, 4), "valid_ppl": perplexity(loss), "wall_s": 0.0})
    return round(loss, 4)


def compute(trainer: Trainer, spec, device: torch.device, world: int, threads: int | None) -> dict[str, Any]:
    """What training cost: FLOPs (measured, train/flops.py), their rate, MFU against the device's peak, the budget."""
    totals = trainer.totals
    precision = precision_name(device, spec.precision)
    peak = spec.peak_tflops * 1e12 if spec.peak_tflops else peak_flops(device, precision, threads)
    achieved = totals.flops / totals.step_seconds if totals.step_seconds else 0.0
    used = trainer.used()
    stopped_by = next((name for name, limit in spec.budgets().items() if used[name] >= limit), None)
    return {
        "train_flops": totals.flops,
        "gflop_per_target_token": _significant(totals.flops / max(totals.tgt_tokens, 1) / 1e9),
        "train_tflops_per_s": _significant(achieved / 1e12), "peak_tflops": _significant(peak / 1e12),
        "peak_source": "spec" if spec.peak_tflops else "measured", "mfu": _significant(achieved / (peak * world)),
        "budget": spec.budgets(), "stopped_by": stopped_by, "train_target_tokens": totals.tgt_tokens,
    }  # fmt: skip


def _significant(value: float) -> float:
    return float(f"{value:.4g}")


def decode_and_score(model, data: Dataset, spec, device: torch.device, directory: Path, log: Log) -> dict[str, Any]:
    """Beam search on every test split, hypotheses written, sacreBLEU scores and decoding speed returned."""
    ev = spec.evaluation
    amp = autocast(device, spec.training.precision)
    scores, decode_seconds, decoded = {}, 0.0, 0
    for split, pairs in data.tests.items():
        log.say(f"decoding {split} ({len(pairs)} sentences, beam {ev.beam_size})")
        log.write({"phase": f"decoding {split}"})
        translation = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab,
                                beam_size=ev.beam_size, alpha=ev.length_penalty, max_extra_len=ev.max_extra_len,
                                batch_size=ev.batch_size, device=device, autocast=amp)  # fmt: skip
        write_text(hypotheses_path(directory, split), "\n".join(translation.hypotheses) + "\n")
        references = [p[1] for p in pairs]
        scores[split] = score(translation.hypotheses, references, ev.lowercase)
        scores[split]["by_length"] = by_length([p[0] for p in pairs], translation.hypotheses, references,
                                               ev.length_buckets, ev.lowercase)  # fmt: skip
        decode_seconds += translation.seconds
        decoded += len(pairs)
    return {"scores": scores, "decode_sentences_per_s": round(decoded / decode_seconds, 1)}


class Log:
    """The run's metrics (metrics.jsonl), optionally TensorBoard scalars, and a plain progress line every 30 s."""

    def __init__(self, directory: Path | None, tensorboard: str | None, resumed: int | None, every_s: float = 30.0):
        self.directory, self.every_s, self.last = directory, every_s, time.monotonic()
        self.last_diagnosed: int | None = None  # the step of the last diagnostics record written
        self.writer = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard extra; checked by the CLI

            self.writer = SummaryWriter(tensorboard, purge_step=None if resumed is None else resumed + 1)

    def diagnostics(self, record: dict[str, Any]) -> None:
        """Appends a diagnostics record (ablate.model.diagnostics) to diagnostics.jsonl."""
        self.last_diagnosed = record["step"]
        if self.directory is not None:
            append_metrics(self.directory, record, DIAGNOSTICS)

    def write(self, record: dict[str, Any]) -> None:
        if self.directory is None:
            return
        append_metrics(self.directory, record)
        if self.writer is not None and "step" in record:
            for key in ("loss", "lr", "valid_loss", "valid_ppl", "valid_bleu"):
                if key in record:
                    tag = key.replace("valid_", "valid/") if key.startswith("valid") else f"train/{key}"
                    self.writer.add_scalar(tag, record[key], record["step"])

    def progress(self, p: Progress, total: int | None) -> None:
        if self.directory is not None and time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            rate = (p.src_tokens + p.tgt_tokens) / p.step_seconds if p.step_seconds else 0.0
            self.say(f"step {p.step}{f'/{total}' if total else ''}  loss {p.loss:.3f}  {rate:,.0f} tok/s")

    def say(self, text: str) -> None:
        if self.directory is not None:
            print(text, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def validate(model, data: Dataset, valid_batches: list, spec, device: torch.device, step: int) -> dict[str, Any]:
    """Validation loss and perplexity on the whole split; greedy BLEU on its first `valid_bleu_pairs`."""
    loss = validation_loss(model, valid_batches, device, autocast(device, spec.training.precision))
    record: dict[str, Any] = {"step": step, "valid_loss": round(loss, 4), "valid_ppl": perplexity(loss)}
    n = min(spec.training.valid_bleu_pairs, len(data.valid_pairs))
    amp = autocast(device, spec.training.precision)
    if n:
        pairs = data.valid_pairs[:n]
        hyps = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab, beam_size=1, alpha=0.0,
                         max_extra_len=spec.evaluation.max_extra_len, batch_size=spec.evaluation.batch_size,
                         device=device, autocast=amp).hypotheses  # fmt: skip
        record["valid_bleu"] = score(hyps, [p[1] for p in pairs], spec.evaluation.lowercase)["bleu"]
    return record


def perplexity(loss: float) -> float:
    """exp(loss) to 2 decimals; infinite past exp's range, NaN for NaN (a diverging run's validation)."""
    return math.inf if loss > 700 else round(math.exp(loss), 2)


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
