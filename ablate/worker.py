"""One run in one process: `python -m ablate.worker RUN_DIR` trains, evaluates and writes result.json.

The runner starts a worker for each job, under torchrun when the run has several GPUs. A worker
shares no memory with the sweep, so an exception, an out-of-memory error or a kill ends that run
alone, and its peak memory is its own. It resumes from the run's last checkpoint when there is one.
SIGINT or SIGTERM stops it after the current step, with a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import resource
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from ablate import distributed
from ablate.data.batches import batches as make_batches
from ablate.data.dataset import Dataset, load_dataset
from ablate.data.tokenizer import PAD
from ablate.errors import UserError
from ablate.evaluation import score, translate
from ablate.job import CHECKPOINT, CHECKPOINT_INFO, METRICS, RESULT, Job, RunLock, checkpoint_step
from ablate.model import build_model, count_parameters
from ablate.results import write_json, write_text
from ablate.training import Progress, Trainer, autocast, precision_name, validation_loss

EXIT_COMPLETED, EXIT_FAILED, EXIT_USER_ERROR, EXIT_BUSY, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Stop:
    """Set by SIGINT or SIGTERM, or when the process that started this one is gone."""

    def __init__(self) -> None:
        self.requested = False
        self.parent = os.getppid()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._request)

    def _request(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __call__(self) -> bool:
        return self.requested or os.getppid() != self.parent  # orphaned: the sweep was killed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ablate.worker RUN_DIR", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        return execute(Job.load(Path(argv[0])))
    finally:
        distributed.teardown()


def execute(job: Job, stop: Stop | None = None) -> int:
    """Trains, evaluates and records one job; returns the exit code (see EXIT_*). Every rank calls it."""
    stop = stop or Stop()
    rank, world, local_rank = distributed.setup(job.device)
    lock = RunLock(job.directory)
    if rank == 0 and not _acquire(lock):
        print(f"{job.directory}: another process ({lock.holder()}) is training this run", file=sys.stderr)
        return EXIT_BUSY
    wall = time.perf_counter()
    result: dict[str, Any] = {
        "experiment": job.experiment, "run": job.run, "seed": job.seed, "differences": job.differences,
        "describe": job.describe, "config_hash": job.config_hash, "status": "running",
        "torch": torch.__version__, "python": platform.python_version(), "host": platform.node(),
    }  # fmt: skip
    if job.note:
        result["note"] = job.note
    code = EXIT_COMPLETED
    try:
        result |= train_and_evaluate(job, rank, world, local_rank, stop)
    except UserError as error:  # bad input (a corpus file, say): the same for every run, so the sweep stops
        result |= {"status": "failed", "error": " ".join(error.lines)}
        code = EXIT_USER_ERROR
    except Exception as error:  # a run's own failure (out of memory, a bug in a plugin) ends that run alone
        result |= {"status": "failed", "error": f"{type(error).__name__}: {error}",
                   "traceback": traceback.format_exc()}  # fmt: skip
        code = EXIT_FAILED
    if result["status"] == "interrupted":
        lock.release()
        return EXIT_INTERRUPTED  # no result.json: the next `ablate run` resumes from the checkpoint
    result["wall_seconds"] = round(time.perf_counter() - wall + result.pop("earlier_wall_seconds", 0.0), 1)
    if rank == 0:
        write_json(job.directory / RESULT, result)
    lock.release()
    return code


def _acquire(lock: RunLock, patience_s: float = 60.0) -> bool:
    """The run's lock; waits a little for a worker orphaned by a killed sweep to notice and exit."""
    deadline = time.monotonic() + patience_s
    while not lock.acquire(wait=False):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def train_and_evaluate(job: Job, rank: int, world: int, local_rank: int, stop: Stop) -> dict[str, Any]:
    spec = job.run_spec()
    data: Dataset = load_dataset(spec.data, spec.tokenizer)
    device = torch.device(f"cuda:{local_rank}" if job.device == "cuda" else "cpu")
    if job.threads is not None:
        torch.set_num_threads(job.threads)  # kernels, hence round-off, depend on it: references pin it
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(job.seed)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD).to(device)
    reset_peak_memory(device)
    trainer = Trainer(model, spec.training, spec.model.d_model, device, rank, world)
    metrics = job.directory / METRICS
    resumed = checkpoint_step(job.directory, job.config_hash)
    earlier_wall = 0.0
    if resumed is not None:
        state = torch.load(job.directory / CHECKPOINT, map_location=device, weights_only=False)
        trainer.load_state_dict(state)
        earlier_wall = state.get("wall_seconds", 0.0)
        if rank == 0:
            truncate_metrics(metrics, resumed)
    elif rank == 0:
        metrics.unlink(missing_ok=True)
    started = time.perf_counter()

    def wall() -> float:
        """Seconds since the job first started, across restarts: the x axis of the learning curves."""
        return round(earlier_wall + time.perf_counter() - started, 2)

    out: dict[str, Any] = {
        "params": count_parameters(model), "device": device_name(device), "gpus": world if device.type == "cuda"
        else 0, "processes": world, "precision": precision_name(device, spec.training.precision),
        "src_vocab": len(data.src_vocab), "tgt_vocab": len(data.tgt_vocab), "train_pairs": len(data.train),
    }  # fmt: skip
    if resumed is not None:
        out["resumed_from_step"] = resumed
    log = Log(metrics if rank == 0 else None, job.tensorboard if rank == 0 else None, resumed)
    valid_batches = make_batches(data.valid, spec.training.max_tokens)

    def on_step(p: Progress) -> None:
        log.write({"step": p.step, "epoch": p.epoch, "loss": round(p.loss, 4), "lr": p.lr,
                   "step_ms": round(p.step_seconds * 1000, 1), "src_tokens": p.src_tokens,
                   "tgt_tokens": p.tgt_tokens, "wall_s": wall()})  # fmt: skip
        log.progress(p, spec.training.max_steps)

    def on_validate(step: int) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if rank == 0:
            record = validate(model, data, valid_batches, spec, device, step)
            log.write(record | {"wall_s": wall()})
        distributed.barrier()
        return record

    def on_checkpoint(step: int) -> None:
        if rank == 0:
            save_checkpoint(job, trainer, wall())
        distributed.barrier()

    checkpoints = spec.training.checkpoint_every is not None
    outcome = trainer.fit(data.train, on_step, on_validate, on_checkpoint if checkpoints else None, stop)
    totals = trainer.totals
    timed = totals.timed_seconds / totals.timed_steps if totals.timed_steps else totals.step_seconds / outcome.steps
    out |= {
        "status": outcome.status, "steps": outcome.steps, "epochs": round(outcome.epochs, 2),
        "train_seconds": round(totals.train_seconds, 1),
        "train_src_tokens_per_s": round(totals.src_tokens / totals.step_seconds, 1),
        "train_tgt_tokens_per_s": round(totals.tgt_tokens / totals.step_seconds, 1),
        "step_ms": round(1000 * timed, 1), "earlier_wall_seconds": earlier_wall,
    }  # fmt: skip
    if outcome.status == "interrupted":
        return out
    if outcome.status == "diverged":
        return out | {"error": outcome.reason, "peak_memory_mib": peak_memory_mib(device)}
    if checkpoints and resumed != outcome.steps:  # a kill while decoding resumes at evaluation
        on_checkpoint(outcome.steps)
    if rank != 0:
        return out  # decoding and scoring are rank 0's
    final = validate(model, data, valid_batches, spec, device, outcome.steps)
    log.write(final | {"wall_s": wall()})
    out |= {"valid_loss": final["valid_loss"], "valid_ppl": final["valid_ppl"]}

    amp = autocast(device, spec.training.precision)
    ev = spec.evaluation
    scores, decode_seconds, decoded = {}, 0.0, 0
    for split, pairs in data.tests.items():
        log.say(f"decoding {split} ({len(pairs)} sentences, beam {ev.beam_size})")
        log.write({"phase": f"decoding {split}"})
        translation = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab,
                                beam_size=ev.beam_size, alpha=ev.length_penalty, max_extra_len=ev.max_extra_len,
                                batch_size=ev.batch_size, device=device, autocast=amp)  # fmt: skip
        write_text(job.directory / "hypotheses" / f"{split}.txt", "\n".join(translation.hypotheses) + "\n")
        scores[split] = score(translation.hypotheses, [p[1] for p in pairs], ev.lowercase)
        decode_seconds += translation.seconds
        decoded += len(pairs)
    log.close()
    return out | {
        "scores": scores, "decode_sentences_per_s": round(decoded / decode_seconds, 1),
        "peak_memory_mib": peak_memory_mib(device),
    }  # fmt: skip


class Log:
    """The run's metrics as JSON lines, optionally TensorBoard scalars, and a plain progress line every 30 s."""

    def __init__(self, path: Path | None, tensorboard: str | None, resumed: int | None, every_s: float = 30.0):
        self.path, self.every_s, self.last = path, every_s, time.monotonic()
        self.writer = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard extra; checked by the CLI

            self.writer = SummaryWriter(tensorboard, purge_step=None if resumed is None else resumed + 1)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None and "step" in record:
            for key in ("loss", "lr", "valid_loss", "valid_ppl", "valid_bleu"):
                if key in record:
                    tag = key.replace("valid_", "valid/") if key.startswith("valid") else f"train/{key}"
                    self.writer.add_scalar(tag, record[key], record["step"])

    def progress(self, p: Progress, total: int | None) -> None:
        if self.path is not None and time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            rate = (p.src_tokens + p.tgt_tokens) / p.step_seconds if p.step_seconds else 0.0
            self.say(f"step {p.step}{f'/{total}' if total else ''}  loss {p.loss:.3f}  {rate:,.0f} tok/s")

    def say(self, text: str) -> None:
        if self.path is not None:
            print(text, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def truncate_metrics(path: Path, step: int) -> None:
    """Keeps the log up to the checkpoint: what came after it will be logged again by the resumed run."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("step", 0) <= step and "phase" not in record:
                kept.append(line)
    write_text(path, "".join(f"{line}\n" for line in kept))


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


def save_checkpoint(job: Job, trainer: Trainer, wall_seconds: float) -> None:
    """The trainer's whole state, then a note of its step and config hash; each file written atomically."""
    path = job.directory / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(trainer.state_dict() | {"wall_seconds": wall_seconds}, tmp)
    tmp.replace(path)
    write_json(job.directory / CHECKPOINT_INFO, {"step": trainer.step, "config_hash": job.config_hash})


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


if __name__ == "__main__":
    sys.exit(main())
