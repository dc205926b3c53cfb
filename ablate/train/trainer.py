"""Training: Adam with a registered schedule, label-smoothed cross-entropy, token-based batches, as TrainingSpec
(ablate.train.spec) says.

The model knows nothing of this module; this module knows nothing of corpora or the runner.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from ablate.data.batches import Batch, Example, batch_indices, collate, lengths
from ablate.data.tokenizer import PAD
from ablate.model.transformer import Transformer
from ablate.record import Status, StoppedBy, Validation
from ablate.train.device import Placement
from ablate.train.distributed import all_sum, any_rank
from ablate.train.flops import FlopModel
from ablate.train.graphs import CapturedSteps, wanted
from ablate.train.loss import smoothed_cross_entropy_sum
from ablate.train.schedules import SCHEDULE
from ablate.train.spec import DEFERRED_STEPS, VALIDATIONS, TrainingSpec
from ablate.train.steps import Outcome, Pending, Progress, Totals
from ablate.train.stopping import Watch


def updates_of(examples: Sequence[Example], spec: TrainingSpec, epoch: int, width: int | None
               ) -> list[list[np.ndarray]]:  # fmt: skip
    """An epoch's batches of example indices (a fixed order per seed and epoch; `width`: the bucket width the run's
    precision gives, TrainingSpec.bucket_width), grouped into optimizer updates of about `batch_tokens` target
    tokens."""
    batches = batch_indices(examples, spec.max_tokens, spec.seed * 100_003 + epoch, width)
    if spec.batch_tokens is None:
        return [[b] for b in batches]
    tgt = lengths(examples)[1]
    updates, current, tokens = [], [], 0
    for b in batches:
        current.append(b)
        tokens += int(tgt[b].sum()) - len(b)
        if tokens >= spec.batch_tokens:
            updates.append(current)
            current, tokens = [], 0
    return updates + ([current] if current else [])


def autocast(device: torch.device, precision: str, cache: bool = True) -> Any:
    """bf16 autocast (fp32 master weights; the loss is taken in fp32), or nothing for fp32. `precision` is
    resolved already (ablate.train.device.Placement): `auto` is decided in one place, not here. `cache`: keep the
    weights' bf16 copies while the context lasts (not under CUDA graph capture)."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision {precision!r}: resolve it first (ablate.train.device.resolve_precision)")
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)


def cross_entropy_sum(model: Transformer, batch: Batch, label_smoothing: float, kernel: str = "torch") -> torch.Tensor:
    """Summed cross-entropy over the batch's targets: label-smoothed, what is optimised; with 0, the NLL (for
    perplexity). One pass over the (B·T, V) logits: training never computes the NLL it does not use. `kernel`:
    TrainingSpec.cross_entropy (ablate.train.loss)."""
    logits = model(batch.src, batch.tgt[:, :-1])  # (B, T, V)
    logits, labels = logits.flatten(0, 1), batch.tgt[:, 1:].flatten()  # (B·T, V), (B·T,)
    return smoothed_cross_entropy_sum(logits, labels, label_smoothing, PAD, kernel)


class Trainer:
    """Runs optimizer steps over token-based batches, a fixed order per (seed, epoch).

    With `world` > 1 processes (see ablate.train.distributed), each rank trains on its slice of every batch
    and the gradients are summed, so an update sees the same global batch as in one process.
    """

    def __init__(self, model: Transformer, spec: TrainingSpec, d_model: int, placement: Placement | None = None):
        """`placement`: where this process trains (the worker resolves it); by default the CPU, one process."""
        placement = placement or Placement.of("cpu", 0, spec.precision, None)
        self.model, self.spec, self.device = model, spec, placement.device
        self.rank, self.world = placement.rank, placement.world
        self.forward = model
        device = self.device
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.forward = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        params = [p for p in model.parameters() if p.requires_grad]
        adam = torch.optim.AdamW if spec.weight_decay > 0 else torch.optim.Adam
        kernel: dict[str, Any] = {"foreach": {"foreach": True}, "fused": {"fused": True}}.get(spec.adam_kernel, {})
        self.width = spec.bucket_width(placement.precision)  # batches' bucket width, or None
        self.graphs: CapturedSteps | None = None  # training.cuda_graphs (ablate.train.graphs)
        self.lr: torch.Tensor | None = None  # with graphs, the learning rate the graphs read, on the device
        if wanted(spec.cuda_graphs, device, self.width, self.world):
            self.lr = torch.zeros((), dtype=torch.float32, device=device)
            kernel.update(capturable=True)
        self.optimizer = adam(params, lr=self.lr if self.lr is not None else 0.0, betas=spec.betas, eps=spec.eps,
                              weight_decay=spec.weight_decay, **kernel)  # fmt: skip
        self.schedule = SCHEDULE.build(spec.schedule, d_model=d_model)
        self.autocast = autocast(device, placement.precision)
        if self.lr is not None:
            captured_amp = autocast(device, placement.precision, cache=False)  # no cast kept across captures
            self.graphs = CapturedSteps(
                device, lambda batch, total, apply: self._accumulate([batch], total, [1.0], captured_amp, apply)
            )
        self.step, self.epoch, self.position = 0, 0, 0  # position: updates of this epoch already made
        self.epoch_updates = 0  # updates in the current epoch (fit sets it)
        self.last_lr = 0.0  # the learning rate of the last update, on the host
        self._pending: Pending | None = None  # fit's steps whose loss is still on the device
        self._diverged: Outcome | None = None  # what settle read, when a pending step had diverged
        self.epoch_fraction = 0.0  # of the current epoch, done
        self.totals = Totals()
        self.flop_model: FlopModel | None = None  # set to count FLOPs (needed by a max_flops budget)
        self._since: float | None = None  # when fit last started counting train_seconds
        self._tenths = 0  # tenths of the budget validated at (see _validation_due)
        self.watch = Watch.of(spec.early_stopping) if spec.early_stopping is not None else None

    def branch(self, spec: TrainingSpec) -> Trainer:
        """This trainer under another spec (a wsd budget's cooldown branch, ablate.train.budgets): the same model,
        wrapper, optimizer and schedule, its step, data position and totals as they stand. Training either trains
        the shared model: the caller keeps the other's state to come back to."""
        other = copy.copy(self)
        other.spec, other.totals = spec, dataclasses.replace(self.totals)
        return other

    def updates(self, examples: Sequence[Example], epoch: int) -> list[list[np.ndarray]]:
        """The epoch's batches, grouped into optimizer updates (`updates_of`)."""
        return updates_of(examples, self.spec, epoch, self.width)

    def shard(self, batch: np.ndarray) -> tuple[np.ndarray, float]:
        """This rank's sentences of a batch and their weight; a rank left without any sees one, weighted 0."""
        mine = batch[self.rank :: self.world]
        return (mine, 1.0) if len(mine) else (batch[:1], 0.0)

    def update(self, batches: list[Batch], total_tokens: int | None = None,
               weights: Sequence[float] | None = None) -> torch.Tensor:  # fmt: skip
        """One optimizer update over `batches` (gradient accumulation); the loss a target token, on the device (read
        it when it is needed: reading waits for the device).

        Data-parallel, `batches` are this rank's shards, `total_tokens` the update's target tokens on
        all ranks and `weights` 0 for a stand-in shard. DDP averages gradients over ranks, hence `world`.
        """
        lr = self.last_lr = self.schedule(self.step + 1, self.progress())
        self.step += 1
        if self.lr is not None:
            self.lr.fill_(lr)
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        total = total_tokens if total_tokens is not None else sum(b.tgt_tokens for b in batches)
        weights = weights or [1.0] * len(batches)
        # captured: one batch an update, and Adam's state made by an eager update first
        if self.graphs is not None and len(batches) == 1 and self.optimizer.state:
            return self.graphs.update(batches[0], total) / total
        return all_sum(self._accumulate(batches, total, weights, self.autocast)) / total

    def _accumulate(self, batches: list[Batch], total: int | torch.Tensor, weights: Sequence[float], amp: Any,
                    apply: bool = True) -> torch.Tensor:  # fmt: skip
        """The work of one update: gradients accumulated over `batches`, clipped, and Adam's step (unless not
        `apply`: a graph's warm-up); the summed loss, on the device. With CUDA graphs the gradients stay
        allocated, zeroed in place at the start (a graph cannot allocate them), else they are set to None at the
        end."""
        if self.graphs is not None:
            self.optimizer.zero_grad(set_to_none=False)
        loss_sum = torch.zeros((), device=self.device)
        for i, (batch, weight) in enumerate(zip(batches, weights, strict=True)):
            sync = self.world == 1 or i == len(batches) - 1  # gradients are all-reduced once an update
            with nullcontext() if sync else self.forward.no_sync(), amp:
                loss = cross_entropy_sum(self.forward, batch.to(self.device), self.spec.label_smoothing,
                                         self.spec.cross_entropy)  # fmt: skip
            (loss / total * (weight * self.world)).backward()  # exactly loss / total in one process
            loss_sum += loss.detach() * weight
        if not apply:
            return loss_sum
        if self.spec.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.clip_norm)
        self.optimizer.step()
        if self.graphs is None:
            self.optimizer.zero_grad(set_to_none=True)
        return loss_sum

    def train_step(self, batches: list[Batch], total_tokens: int | None = None,
                   weights: Sequence[float] | None = None) -> float:  # fmt: skip
        """One optimizer update (`update`), its loss a target token read back: it waits for the device."""
        return self.update(batches, total_tokens, weights).item()

    def sync_every(self) -> int:
        """Steps between reads of the loss (training.sync_every): `auto` defers them on CUDA alone, and not where a
        limit in seconds or several processes need every step's state on the host. A budget point's hook reads the
        pending steps itself before it looks (`settle`)."""
        every = self.spec.sync_every
        if every != "auto":
            return every
        eager = self.device.type != "cuda" or self.spec.max_seconds is not None or self.world > 1
        return 1 if eager else DEFERRED_STEPS

    def settle(self) -> bool:
        """Reads the steps whose loss is still on the device, as a validation or a checkpoint does before it looks:
        a budget point's hook calls it before it saves, evaluates or forks the run. True when one of them diverged:
        the hook then does nothing, and fit ends the run as diverged."""
        if self._pending is not None and self._diverged is None:
            self._diverged = self._pending.read(self.totals, False)
        return self._diverged is not None

    def used(self) -> dict[str, float]:
        """How much of each budget of the spec (TrainingSpec.budgets) the run has used."""
        totals = self.totals
        used = {"max_steps": self.step, "max_epochs": self.epoch + self.epoch_fraction,
                "max_target_tokens": totals.tgt_tokens, "max_flops": totals.flops,
                "max_seconds": totals.step_seconds}  # fmt: skip
        return {name: used[name] for name in self.spec.budgets()}

    def reached(self) -> StoppedBy | None:
        """The first limit of the budget (in the spec's order) that the run has reached, if any."""
        used = self.used()
        return next((StoppedBy(name) for name, limit in self.spec.budgets().items() if used[name] >= limit), None)

    def progress(self) -> float:
        """The fraction of the run's budget used: the largest over its limits, since the first reached ends it."""
        return max(used / self.spec.budgets()[name] for name, used in self.used().items())

    def done(self) -> bool:
        """A budget reached: steps, epochs, target tokens, FLOPs or seconds. Ranks agree on seconds, which differ."""
        reached = self.progress() >= 1.0
        if self.spec.max_seconds is not None and self.world > 1:
            reached = any_rank(reached, self.device)
        return reached

    def fit(self, examples: Sequence[Example], on_step: Callable[[Progress], None] | None = None,
            on_validate: Callable[[int], Validation | None] | None = None,
            on_checkpoint: Callable[[int], None] | None = None, should_stop: Callable[[], bool] | None = None,
            before_update: Callable[[], bool] | None = None) -> Outcome:  # fmt: skip
        """Trains until its budget is used, from wherever the trainer's step, epoch and position are.

        `on_validate` returns what it measured (rank 0's), which early stopping reads (training.early_stopping:
        the run ends completed, `stopped_early`, after the validation that exhausts its patience).
        `should_stop` is asked after every step; when it says so (on any rank), training stops with
        status `interrupted`, after `on_checkpoint`. `before_update` is called before every update (budget
        points: ablate.train.budgets); when it returns True, training stops as interrupted, and checkpointing
        is its business.
        """
        spec = self.spec
        if spec.max_flops is not None and self.flop_model is None:
            raise ValueError("a max_flops budget needs the trainer's flop_model")
        self.model.train()
        self._since = time.perf_counter()
        self._tenths = math.floor(self.progress() * VALIDATIONS)  # validations passed, without validate_every
        first = True
        updates = self.updates(examples, self.epoch)
        self.epoch_updates = len(updates)
        if self.watch is not None and self.watch.exhausted:  # resumed from the checkpoint where it stopped
            return self._stopped_early(self.epoch + self.epoch_fraction)
        every = self.sync_every()
        pending = self._pending = Pending(on_step, spec.diverge_loss)  # steps whose loss is still on the device
        self._diverged = None
        while not self.done():
            stopped = before_update is not None and before_update()
            if self._diverged is not None:  # read by the hook (settle)
                self._count_time()
                return self._diverged
            if stopped:
                self._count_time()
                return Outcome(Status.INTERRUPTED, self.step, self.epoch + self.epoch_fraction,
                               f"stopped at step {self.step}")  # fmt: skip
            if self.position >= len(updates):
                self.epoch, self.position, self.epoch_fraction = self.epoch + 1, 0, 0.0
                updates = self.updates(examples, self.epoch)
                self.epoch_updates = len(updates)
                continue
            self.position += 1
            # every step when reads are not deferred, timed as before; else the first (warm-up) and each `every`
            epochs = self._update_at(examples, updates, pending)
            if (first or len(pending) >= every) and (diverged := pending.read(self.totals, first)):
                self._count_time()
                return diverged
            first = False
            last = self.done()
            # the end is validated by the pipeline, on the weights it scores; with early stopping the watch sees the
            # last step too, so that a run still improving at its cap has its last step as the best
            validate = on_validate is not None and self._validation_due() and (not last or self.watch is not None)
            diagnose = bool(spec.diagnostics_every) and self.step % (spec.diagnostics_every or 1) == 0
            # the log, the validation and the diagnostics see every step up to this one
            if (last or validate or diagnose) and (diverged := pending.read(self.totals, False)):
                self._count_time()
                return diverged
            if validate and on_validate is not None:
                record = on_validate(self.step)
                self.model.train()
                if self._patience_exhausted(record) and not last:
                    return self._stopped_early(epochs)
            stop = should_stop is not None and any_rank(should_stop(), self.device)
            checkpoint = on_checkpoint is not None and (stop or self.checkpoint_due())
            if (stop or checkpoint) and (diverged := pending.read(self.totals, False)):
                self._count_time()
                return diverged
            if checkpoint and on_checkpoint is not None:
                on_checkpoint(self.step)
            if stop:
                self._count_time()
                return Outcome(Status.INTERRUPTED, self.step, epochs, f"stopped at step {self.step}")
        self._count_time()
        epochs = self.epoch + (self.position / len(updates) if updates else 0.0)
        return Outcome(Status.COMPLETED, self.step, float(epochs), stopped_by=self.reached())

    def _update_at(self, examples: Sequence[Example], updates: list[list[np.ndarray]], pending: Pending) -> float:
        """The epoch's update at `position` (already advanced past it), its loss left pending and its tokens and FLOPs
        counted; the epochs trained after it."""
        update = updates[self.position - 1]
        shards = [self.shard(b) for b in update]
        width = self.width
        batches = [collate([examples[i] for i in indices], width) for indices, _ in shards]  # this rank's rows alone
        src, tgt = self._lengths(examples)
        n_src = sum(int(src[b].sum()) for b in update)
        n_tgt = sum(int(tgt[b].sum()) - len(b) for b in update)
        pending.begin()
        loss = self.update(batches, n_tgt, [w for _, w in shards])
        epochs = self.epoch + self.position / len(updates)
        pending.add(Progress(self.step, self.epoch, math.nan, self.last_lr, 0.0, n_src, n_tgt), loss, epochs)
        totals = self.totals  # not held across steps: a budget branch's end restores the trunk's
        totals.src_tokens += n_src
        totals.tgt_tokens += n_tgt
        if self.flop_model is not None:
            totals.flops += sum(self.flop_model.batch((src, tgt), b[r :: self.world], width)
                                for b in update for r in range(self.world) if len(b[r :: self.world]))  # fmt: skip
        self.epoch_fraction = self.position / len(updates)
        return epochs

    def _lengths(self, examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
        """`lengths` of the examples trained on, counted once for a list (a prepared corpus has them already)."""
        if getattr(self, "_counted", (None,))[0] is not examples:
            self._counted = (examples, *lengths(examples))
        return self._counted[1], self._counted[2]

    def _stopped_early(self, epochs: float) -> Outcome:
        self._count_time()
        watch = self.watch
        assert watch is not None
        return Outcome(
            Status.COMPLETED,
            self.step,
            epochs,
            f"{watch.metric} did not improve on step "
            f"{watch.best_step}'s {watch.best:g} in {watch.since_best} validations",
            stopped_by=StoppedBy.EARLY_STOPPING,
        )

    def _patience_exhausted(self, record: Validation | None) -> bool:
        """Early stopping's look at a validation (rank 0's record; the other ranks follow its decision)."""
        if self.watch is None:
            return False
        value = None if record is None else getattr(record, self.watch.metric)
        if value is not None:
            self.watch.see(self.step, value)
        return any_rank(value is not None and self.watch.exhausted, self.device)

    def epoch_ended(self) -> bool:
        """The last step ended a pass over the data (the next step starts the next epoch)."""
        return self.epoch_updates > 0 and self.position >= self.epoch_updates

    def checkpoint_due(self) -> bool:
        """The step is one of `checkpoint_every`'s: those whose weights a run of this length averages."""
        every = self.spec.checkpoint_every
        if every == "epoch":
            return self.epoch_ended()
        return every is not None and self.step % every == 0

    def _validation_due(self) -> bool:
        """Every `validate_every` steps (or passes); without it, each time the run passes another tenth of its
        budget."""
        if self.spec.validate_every == "epoch":
            return self.epoch_ended()
        if self.spec.validate_every:
            return self.step % self.spec.validate_every == 0
        tenths = math.floor(self.progress() * VALIDATIONS)
        due = tenths > self._tenths
        if self.spec.max_seconds is not None and self.world > 1:  # ranks' clocks differ: validate together
            due = any_rank(due, self.device)
        if due:
            self._tenths = max(tenths, self._tenths + 1)  # a rank whose clock lags does not validate twice
        return due

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Work done inside (a budget point's evaluation, a cooldown branch) is not counted in train_seconds."""
        self._count_time()
        try:
            yield
        finally:
            if self._since is not None:
                self._since = time.perf_counter()

    def _count_time(self) -> None:
        """Adds the wall time since fit started (or since the last count) to train_seconds."""
        if self._since is not None:
            now = time.perf_counter()
            self.totals.train_seconds += now - self._since
            self._since = now

    def state_dict(self) -> dict[str, Any]:
        self._count_time()
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
            "epoch": self.epoch, "position": self.position, "epoch_fraction": self.epoch_fraction,
            "totals": asdict(self.totals),
            "early_stopping": self.watch.state_dict() if self.watch is not None else None,
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.graphs is not None:
            self.graphs.forget()
        if self.lr is not None:  # a checkpoint of an eager run resumed with graphs: Adam as graphs need it
            for group in self.optimizer.param_groups:
                group["lr"], group["capturable"] = self.lr, True
            for param_state in self.optimizer.state.values():
                param_state["step"] = param_state["step"].to(self.device)
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.epoch_fraction = state.get("epoch_fraction", 0.0)
        self.totals = Totals(**state.get("totals", {}))
        if self.watch is not None and state.get("early_stopping") is not None:
            self.watch.load_state_dict(state["early_stopping"])
        # torch sets RNG states from CPU tensors only, and checkpoints.load maps every tensor to the run's device
        torch.set_rng_state(state["rng"].cpu())
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])


@torch.no_grad()
def validation_loss(model: Transformer, batches: Sequence[Batch], device: torch.device, amp: Any) -> float:
    """NLL a target token over the batches (no label smoothing): its exp is the perplexity."""
    was_training = model.training
    model.eval()
    nll_sum, tokens = torch.zeros((), device=device), 0
    for batch in batches:
        with amp:
            nll = cross_entropy_sum(model, batch.to(device), 0.0)
        nll_sum += nll
        tokens += batch.tgt_tokens
    model.train(was_training)
    return nll_sum.item() / max(tokens, 1)
