"""Training: Adam with a registered schedule, label-smoothed cross-entropy, token-based batches.

The model knows nothing of this module; this module knows nothing of corpora or the runner.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ablate.data.batches import Batch, Example, batch_indices, collate
from ablate.data.tokenizer import PAD
from ablate.model import Transformer
from ablate.schedules import SCHEDULE
from ablate.spec import TrainingSpec


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device, precision: str) -> Any:
    """bf16 autocast on CUDA (precision auto or bf16); fp32 everywhere else."""
    if device.type == "cuda" and precision in ("auto", "bf16"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def precision_name(device: torch.device, precision: str) -> str:
    return "bf16" if device.type == "cuda" and precision in ("auto", "bf16") else "fp32"


def loss_sums(model: Transformer, batch: Batch, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss (what is optimised) and summed NLL (for perplexity) over the batch's targets."""
    logits = model(batch.src, batch.tgt[:, :-1]).float()  # (B, T, V)
    logits, labels = logits.flatten(0, 1), batch.tgt[:, 1:].flatten()
    loss = F.cross_entropy(logits, labels, ignore_index=PAD, label_smoothing=label_smoothing, reduction="sum")
    nll = F.cross_entropy(logits.detach(), labels, ignore_index=PAD, reduction="sum")
    return loss, nll


@dataclass
class Progress:
    """What one optimizer step reports."""

    step: int
    epoch: int
    loss: float
    lr: float
    step_seconds: float
    src_tokens: int
    tgt_tokens: int


@dataclass
class Outcome:
    status: str  # completed | diverged
    steps: int
    epochs: float
    train_seconds: float
    src_tokens: int
    tgt_tokens: int
    step_times: list[float] = field(default_factory=list)
    reason: str = ""


class Trainer:
    """Runs optimizer steps over token-based batches, a fixed order per (seed, epoch)."""

    def __init__(self, model: Transformer, spec: TrainingSpec, d_model: int, device: torch.device):
        self.model, self.spec, self.device = model, spec, device
        params = [p for p in model.parameters() if p.requires_grad]
        adam = torch.optim.AdamW if spec.weight_decay > 0 else torch.optim.Adam
        self.optimizer = adam(params, lr=0.0, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)
        self.schedule = SCHEDULE.build(spec.schedule, d_model=d_model)
        self.autocast = autocast(device, spec.precision)
        self.step, self.epoch, self.position = 0, 0, 0  # position: batches of this epoch already used

    def updates(self, examples: Sequence[Example], epoch: int) -> list[list[list[int]]]:
        """The epoch's batches, grouped into optimizer updates of about `batch_tokens` target tokens."""
        batches = batch_indices(examples, self.spec.max_tokens, self.spec.seed * 100_003 + epoch)
        if self.spec.batch_tokens is None:
            return [[b] for b in batches]
        updates, current, tokens = [], [], 0
        for b in batches:
            current.append(b)
            tokens += sum(len(examples[i][1]) - 1 for i in b)
            if tokens >= self.spec.batch_tokens:
                updates.append(current)
                current, tokens = [], 0
        return updates + ([current] if current else [])

    def train_step(self, batches: list[Batch]) -> float:
        """One optimizer update over `batches` (gradient accumulation); returns the loss a target token."""
        self.step += 1
        lr = self.schedule(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        total = sum(b.tgt_tokens for b in batches)
        loss_sum = torch.zeros((), device=self.device)
        for batch in batches:
            with self.autocast:
                loss, _ = loss_sums(self.model, batch.to(self.device), self.spec.label_smoothing)
            (loss / total).backward()
            loss_sum += loss.detach()
        if self.spec.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return (loss_sum / total).item()  # a CPU-GPU sync a step: divergence must be caught where it happens

    def fit(self, examples: Sequence[Example], on_step: Callable[[Progress], None] | None = None,
            on_validate: Callable[[int], None] | None = None,
            on_checkpoint: Callable[[int], None] | None = None) -> Outcome:  # fmt: skip
        """Trains until max_steps or max_epochs, from wherever the trainer's step, epoch and position are."""
        spec = self.spec
        self.model.train()
        src_tokens = tgt_tokens = 0
        step_times: list[float] = []
        start = time.perf_counter()
        while True:
            updates = self.updates(examples, self.epoch)
            while self.position < len(updates):
                batches = [collate([examples[i] for i in b]) for b in updates[self.position]]
                self.position += 1
                t0 = time.perf_counter()
                loss = self.train_step(batches)
                step_times.append(time.perf_counter() - t0)
                n_src, n_tgt = sum(b.src_tokens for b in batches), sum(b.tgt_tokens for b in batches)
                src_tokens, tgt_tokens = src_tokens + n_src, tgt_tokens + n_tgt
                epochs = self.epoch + self.position / len(updates)
                if on_step:
                    lr = self.optimizer.param_groups[0]["lr"]
                    on_step(Progress(self.step, self.epoch, loss, lr, step_times[-1], n_src, n_tgt))
                if not math.isfinite(loss) or loss > spec.diverge_loss:
                    return Outcome("diverged", self.step, epochs, time.perf_counter() - start, src_tokens,
                                   tgt_tokens, step_times, f"training loss {loss:.4g} at step {self.step}")  # fmt: skip
                last = spec.max_steps is not None and self.step >= spec.max_steps
                if on_validate and spec.validate_every and self.step % spec.validate_every == 0 and not last:
                    on_validate(self.step)
                    self.model.train()
                if on_checkpoint and spec.checkpoint_every and self.step % spec.checkpoint_every == 0:
                    on_checkpoint(self.step)
                if last:
                    return Outcome("completed", self.step, epochs, time.perf_counter() - start, src_tokens,
                                   tgt_tokens, step_times)  # fmt: skip
            self.epoch, self.position = self.epoch + 1, 0
            if spec.max_epochs is not None and self.epoch >= spec.max_epochs:
                return Outcome("completed", self.step, float(self.epoch), time.perf_counter() - start, src_tokens,
                               tgt_tokens, step_times)  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
            "epoch": self.epoch, "position": self.position, "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        torch.set_rng_state(state["rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])


@torch.no_grad()
def validation_loss(model: Transformer, batches: Sequence[Batch], device: torch.device, amp: Any) -> float:
    """NLL a target token over the batches (no label smoothing): its exp is the perplexity."""
    was_training = model.training
    model.eval()
    nll_sum, tokens = torch.zeros((), device=device), 0
    for batch in batches:
        with amp:
            _, nll = loss_sums(model, batch.to(device), 0.0)
        nll_sum += nll
        tokens += batch.tgt_tokens
    model.train(was_training)
    return nll_sum.item() / max(tokens, 1)
