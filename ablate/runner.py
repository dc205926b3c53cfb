"""`ablate run`: trains and evaluates every run of an experiment and writes its results and summary.

results/<experiment>/runs/<run>/seed-<n>/config.yaml     the resolved spec
                                        metrics.jsonl   training and validation log
                                        result.json     everything measured
                                        hypotheses/     one detokenised file per test split
results/<experiment>/summary.md, summary.csv
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import resource
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablate.data.batches import batches as make_batches
from ablate.data.dataset import Dataset, load_dataset
from ablate.data.tokenizer import PAD
from ablate.errors import UserError
from ablate.evaluation import score, translate
from ablate.experiment import Experiment, Run
from ablate.model import build_model, count_parameters
from ablate.progress import Reporter
from ablate.results import write_json, write_text, write_yaml
from ablate.summary import summary_frame, write_summary
from ablate.training import Progress, Trainer, autocast, precision_name, resolve_device, validation_loss


@dataclass
class RunContext:
    experiment: Experiment
    run: Run
    seed: int
    directory: Path


def run_experiment(experiment: Experiment, results: Path, reporter: Reporter) -> list[dict[str, Any]]:
    """Every run of the experiment, one after the other; a run that fails is recorded and the others go on."""
    root = results / experiment.name
    rows = []
    for i, run in enumerate(experiment.runs):
        seed = run.spec.training.seed
        context = RunContext(experiment, run, seed, root / "runs" / run.name / f"seed-{seed}")
        reporter.start_run(f"[{i + 1}/{len(experiment.runs)}] {run.name}", run.spec.training.max_steps)
        result = execute(context, reporter)
        reporter.end_run(result)
        rows.append(result)
    write_summary(root, summary_frame(rows))
    return rows


def execute(ctx: RunContext, reporter: Reporter) -> dict[str, Any]:
    """Trains and evaluates one run; whatever happens, writes its result.json."""
    spec, directory = ctx.run.spec, ctx.directory
    wall = time.perf_counter()
    result: dict[str, Any] = {
        "experiment": ctx.experiment.name, "run": ctx.run.name, "seed": ctx.seed,
        "differences": ctx.run.differences, "describe": ctx.run.describe(), "status": "running",
        "torch": torch.__version__, "python": platform.python_version(),
    }  # fmt: skip
    write_yaml(directory / "config.yaml", spec.model_dump(mode="json"))
    metrics = directory / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    try:
        result |= train_and_evaluate(ctx, reporter, metrics)
    except UserError:
        raise  # bad input concerns every run: stop the sweep with its one-line message
    except Exception as error:  # a run's own failure (out of memory, a bug in a plugin) ends that run alone
        result |= {"status": "failed", "error": f"{type(error).__name__}: {error}",
                   "traceback": traceback.format_exc()}  # fmt: skip
    result["wall_seconds"] = round(time.perf_counter() - wall, 1)
    write_json(directory / "result.json", result)
    return result


def train_and_evaluate(ctx: RunContext, reporter: Reporter, metrics: Path) -> dict[str, Any]:
    spec = ctx.run.spec
    data: Dataset = load_dataset(spec.data, spec.tokenizer)
    device = resolve_device(spec.training.device)
    torch.manual_seed(ctx.seed)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD).to(device)
    reset_peak_memory(device)
    trainer = Trainer(model, spec.training, spec.model.d_model, device)
    valid_batches = make_batches(data.valid, spec.training.max_tokens)
    out: dict[str, Any] = {
        "params": count_parameters(model), "device": device_name(device), "precision": precision_name(
            device, spec.training.precision), "src_vocab": len(data.src_vocab), "tgt_vocab": len(data.tgt_vocab),
        "train_pairs": len(data.train),
    }  # fmt: skip

    def log(record: dict[str, Any]) -> None:
        with metrics.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def on_step(p: Progress) -> None:
        tokens_per_s = (p.src_tokens + p.tgt_tokens) / p.step_seconds if p.step_seconds else 0.0
        log({"step": p.step, "epoch": p.epoch, "loss": round(p.loss, 4), "lr": p.lr,
             "step_ms": round(p.step_seconds * 1000, 1), "src_tokens": p.src_tokens,
             "tgt_tokens": p.tgt_tokens})  # fmt: skip
        reporter.step(p.step, p.loss, tokens_per_s)

    def on_validate(step: int) -> dict[str, Any]:
        record = validate(model, data, valid_batches, spec, device, step)
        log(record)
        reporter.validated(record)
        return record

    def on_checkpoint(step: int) -> None:
        save_checkpoint(ctx.directory / "checkpoints" / "last.pt", trainer)

    outcome = trainer.fit(data.train, on_step, on_validate, on_checkpoint if spec.training.checkpoint_every else None)
    step_times = outcome.step_times[1:] or outcome.step_times  # the first step pays for allocation and warm-up
    stepping = sum(outcome.step_times)  # optimizer steps alone; validation and checkpoints not counted
    out |= {
        "status": outcome.status, "steps": outcome.steps, "epochs": round(outcome.epochs, 2),
        "train_seconds": round(outcome.train_seconds, 1),
        "train_src_tokens_per_s": round(outcome.src_tokens / stepping, 1),
        "train_tgt_tokens_per_s": round(outcome.tgt_tokens / stepping, 1),
        "step_ms": round(1000 * sum(step_times) / len(step_times), 1),
    }  # fmt: skip
    if outcome.status == "diverged":
        out["error"] = outcome.reason
        out["peak_memory_mib"] = peak_memory_mib(device)
        return out
    if spec.training.checkpoint_every:
        save_checkpoint(ctx.directory / "checkpoints" / "last.pt", trainer)
    final = on_validate(outcome.steps)
    out |= {"valid_loss": final["valid_loss"], "valid_ppl": final["valid_ppl"]}

    amp = autocast(device, spec.training.precision)
    ev = spec.evaluation
    scores, decode_seconds, decoded = {}, 0.0, 0
    for split, pairs in data.tests.items():
        reporter.note(f"decoding {split} ({len(pairs)} sentences, beam {ev.beam_size})")
        translation = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab,
                                beam_size=ev.beam_size, alpha=ev.length_penalty, max_extra_len=ev.max_extra_len,
                                batch_size=ev.batch_size, device=device, autocast=amp)  # fmt: skip
        write_text(ctx.directory / "hypotheses" / f"{split}.txt", "\n".join(translation.hypotheses) + "\n")
        scores[split] = score(translation.hypotheses, [p[1] for p in pairs], ev.lowercase)
        decode_seconds += translation.seconds
        decoded += len(pairs)
    out |= {
        "scores": scores, "decode_sentences_per_s": round(decoded / decode_seconds, 1),
        "peak_memory_mib": peak_memory_mib(device),
    }  # fmt: skip
    return out


def validate(model, data: Dataset, valid_batches: list, spec, device: torch.device, step: int) -> dict[str, Any]:
    """Validation loss and perplexity on the whole split; greedy BLEU on its first `valid_bleu_pairs`."""
    amp = autocast(device, spec.training.precision)
    loss = validation_loss(model, valid_batches, device, amp)
    record: dict[str, Any] = {"step": step, "valid_loss": round(loss, 4), "valid_ppl": round(math.exp(loss), 2)}
    n = min(spec.training.valid_bleu_pairs, len(data.valid_pairs))
    if n:
        pairs = data.valid_pairs[:n]
        hyps = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab, beam_size=1, alpha=0.0,
                         max_extra_len=spec.evaluation.max_extra_len, batch_size=spec.evaluation.batch_size,
                         device=device, autocast=amp).hypotheses  # fmt: skip
        record["valid_bleu"] = score(hyps, [p[1] for p in pairs], spec.evaluation.lowercase)["bleu"]
    return record


def save_checkpoint(path: Path, trainer: Trainer) -> None:
    """Written whole or not at all: a temporary file, then an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(trainer.state_dict(), tmp)
    tmp.replace(path)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


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
