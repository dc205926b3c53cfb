"""`ablate bench`: every run of an experiment timed side by side on this machine, apart from training.

The speed a run measures while it trains compares machines as much as models: runs are reused by config hash
wherever they trained, so one experiment's rows can come from a Zen 4, an AVX2-only EPYC and an H200. A bench
builds each run's model and batches here, from the run's spec and seed, and times them in rounds:

- training updates (forward, backward, Adam; the run's precision, loss kernel and shape buckets, as
  ablate.train.trainer trains them): the first `updates` updates of the run's epoch 0, in a row, as it trains;
- then, in the warm-up and the first `decode_rounds` rounds (3), greedy decoding and beam search (the run's beam
  size and length penalty) of the first sentences of its first test split, each output forced to its source's
  length in tokens (`LengthForced`): untrained weights would decode to the length limit, trained ones stop near
  the source's length. Decoding takes most of a round on a CPU, so the later rounds time the updates alone and the
  updates' ratios narrow in fewer minutes.

A round is each run's turn in an order rotated every round (`order_of`), so that every run takes every place in
a round alike and the machine's drift falls on every run alike. The baseline always first, with each update of
every run in turn (A1, B1, A2, B2, ...), measured the order as well as the runs (issue 76): every run but the first
followed an update of the same shapes, and copies of the baseline read 1.14x to 1.67x its speed on a Xeon with AMX.
tests/test_bench.py holds an A/A bench (the baseline against copies of itself) to 1.00 within its intervals.

Each run's speed over the baseline's is the geometric mean of the rounds' paired ratios with a 95% t interval over
rounds; the bench stops once every one has an interval within the target (±3%), after at least three rounds, or
when the rounds or the time run out. The share of its cores that other processes left it over the rounds is
recorded (`core_share`) and said when under 0.9. The first round warms up (kernels built for each shape) and is
not counted. Peak memory is measured once a run, apart: on CUDA by torch's allocator, on a CPU in a process forked for
the run before anything here computes (so every run starts from the same process: torch and the corpus loaded).

Speed depends on the shapes, kernels and lengths, not on the weights' values, so no trained weights are needed;
`weights="trained"` loads each run's last checkpoint where it has one, to check that (benchmarks/README.md).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ablate.data.batches import Batch, collate, lengths, pad
from ablate.data.dataset import Dataset, load_dataset
from ablate.data.tokenizer import EOS, PAD
from ablate.errors import UserError
from ablate.model.decoding import translate_ids
from ablate.model.transformer import Transformer, build_model, count_parameters
from ablate.record import Ratio, RunSpeed, SpeedRecord
from ablate.rundir import config_hash, job_dir, last_checkpoint, write_speed
from ablate.sweep.experiment import Experiment, Run
from ablate.train import checkpoints
from ablate.train.bf16 import bf16_matmuls
from ablate.train.device import CoreShare, Placement, device_name, resolve_precision
from ablate.train.flops import FlopModel, peak_flops, significant
from ablate.train.pipeline import peak_memory_mib, reset_peak_memory
from ablate.train.trainer import Trainer, autocast, updates_of


@dataclass(frozen=True)
class Options:
    """How long and how closely a bench measures."""

    device: str = "cpu"  # cpu or cuda
    threads: int | None = None  # CPU threads; None: torch's default, every core
    updates: int = 8  # training updates a run a round
    decode_sentences: int = 50  # of the run's first test split, decoded greedily and with beam search a round
    target: float = 0.03  # the ratios' 95% half-width aimed at, relative
    min_rounds: int = 3
    max_rounds: int = 30
    max_seconds: float = 300.0  # an experiment's bench stops here from its start, whatever the intervals
    weights: str = "initial"  # or trained: each run's last checkpoint under results/, where it has one
    decode_rounds: int = 3  # the first counted rounds decode (the warm-up too); later ones time updates alone


@dataclass
class Sample:
    """One round of one run."""

    step_seconds: float  # a training update, the mean over the round's updates
    tokens_per_s: float
    greedy_per_s: float | None
    beam_per_s: float | None


class LengthForced:
    """The model as decoding sees it, with every sentence's output ending at its source's length in tokens: </s>
    is barred before that step and forced at it. The model computes every step as it would; only the choice of
    </s> is fixed, so that decoding costs what a trained model's does whatever the weights."""

    def __init__(self, model: Transformer):
        self.model, self.steps = model, 0
        self.lengths: Tensor | None = None

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def new_cache(self) -> Any:
        self.steps = 0
        return self.model.new_cache()

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: Any = None) -> Tensor:
        self.steps += 1
        self.lengths = src_mask.sum((1, 2, 3))  # (rows,): the rows' source tokens, </s> included
        return self.model.decode(tgt, memory, src_mask, cache)

    def generator(self, hidden: Tensor) -> Tensor:
        logits = self.model.generator(hidden)
        assert self.lengths is not None
        end = self.lengths <= self.steps  # (rows,)
        logits[:, EOS] = torch.where(end, 1e4, float("-inf")).to(logits.dtype)
        return logits


@dataclass
class Subject:
    """One run under the bench, built on this machine: its model, trainer, fixed updates and decoding slice."""

    run: Run
    data: Dataset
    device: torch.device
    precision: str
    threads: int | None
    updates: list[list[np.ndarray]]
    slice_ids: list[list[int]]  # the decoding slice, source ids with </s>
    model: Transformer | None = None
    trainer: Trainer | None = None
    batches: list[list[Batch]] = field(default_factory=list)
    sources: list[Tensor] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    flops_per_update: float | None = None

    @classmethod
    def of(cls, run: Run, device: torch.device, options: Options) -> Subject:
        """Its data and the indices of its updates (no model yet: nothing computes before the memory probes fork)."""
        spec = run.spec
        data = load_dataset(spec.data, spec.tokenizer)
        precision = resolve_precision(device, spec.training.precision)
        width = spec.training.bucket_width(precision)
        updates = updates_of(data.train, spec.training, 0, width)[: options.updates]
        split = spec.data.test[0] if spec.data.test else None
        sources = [p[0] for p in data.tests[split][: options.decode_sentences]] if split else []
        slice_ids = [[*ids, EOS] for ids in data.src_vocab.encode(sources)] if sources else []
        return cls(run, data, device, precision, options.threads, updates, slice_ids)

    @property
    def tokens(self) -> tuple[int, int]:
        """Source and target tokens of the fixed updates."""
        src, tgt = lengths(self.data.train)
        return (sum(int(src[b].sum()) for u in self.updates for b in u),
                sum(int(tgt[b].sum()) - len(b) for u in self.updates for b in u))  # fmt: skip

    def build(self, weights: Path | None = None) -> None:
        """The model (the run's seeded initialisation, or `weights`), its trainer, and the batches on the device."""
        spec = self.run.spec
        torch.manual_seed(spec.training.seed)
        vocab = (len(self.data.src_vocab), len(self.data.tgt_vocab))
        self.model = build_model(spec.model, *vocab, pad_id=PAD).to(self.device)
        if weights is not None:
            self.model.load_state_dict(checkpoints.load(weights, self.device)["model"])
        placement = Placement(self.device, self.precision, self.threads)
        self.trainer = Trainer(self.model, spec.training, spec.model.d_model, placement)
        train, width = self.data.train, self.trainer.width
        self.batches = [[collate([train[i] for i in b], width).to(self.device) for b in u] for u in self.updates]
        order = sorted(range(len(self.slice_ids)), key=lambda i: len(self.slice_ids[i]))
        size = spec.evaluation.batch_size
        self.sources = [pad([self.slice_ids[i] for i in order[first : first + size]]).to(self.device)
                        for first in range(0, len(order), size)]  # fmt: skip

    def free(self) -> None:
        self.model = self.trainer = None
        self.batches, self.sources = [], []

    def update(self, i: int) -> float:
        """Seconds of the run's `i`th fixed update: forward, backward and Adam (train_step's .item() synchronises)."""
        assert self.trainer is not None
        batches = self.batches[i]
        with bf16_matmuls(self.device, self.precision):
            start = time.perf_counter()
            self.trainer.train_step(batches, sum(b.tgt_tokens for b in batches))
            return time.perf_counter() - start

    def decode(self, beam: int) -> float:
        """Sentences a second of the slice decoded with `beam` (1: greedily), outputs forced to their sources'
        lengths."""
        assert self.model is not None
        ev = self.run.spec.evaluation
        self.model.eval()
        forced = LengthForced(self.model)
        with bf16_matmuls(self.device, self.precision), autocast(self.device, self.precision):
            start = time.perf_counter()
            for src in self.sources:
                translate_ids(forced, src, beam, ev.length_penalty, ev.max_extra_len,  # type: ignore[arg-type]
                              ev.length_penalty_form)  # fmt: skip
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds = time.perf_counter() - start
        self.model.train()
        return len(self.slice_ids) / seconds


def order_of(number: int, runs: int) -> list[int]:
    """The runs' order in round `number`: turned by one every round, and reversed every other cycle of `runs`
    rounds, so that in any 2 x `runs` rounds in a row each run takes every place twice and follows either run beside
    it in the file as often."""
    order = list(range(runs)) if (number // runs) % 2 == 0 else list(range(runs))[::-1]
    shift = number % runs
    return order[shift:] + order[:shift]


def one_round(subjects: Sequence[Subject], decode: bool = True, number: int = 0) -> list[Sample]:
    """Round `number`: one run after another in `order_of(number)`, each its fixed updates in a row, as it trains,
    then, if `decode`, its greedy decoding and beam search. A run's updates follow its own, as in training, never
    another run's update of the same shapes: kernels the run before had just built for them (oneDNN's primitives on
    a CPU with native bf16, a cache capped at 32) flattered every run but the first (issue 76: copies of the
    baseline at 1.14x to 1.67x)."""
    seconds: list[float] = [0.0] * len(subjects)
    greedy: list[float | None] = [None] * len(subjects)
    beam: list[float | None] = [None] * len(subjects)
    for k in order_of(number, len(subjects)):
        subject = subjects[k]
        seconds[k] = sum(subject.update(i) for i in range(len(subject.batches)))
        if decode and subject.sources:
            greedy[k] = subject.decode(1)
            beam[k] = subject.decode(subject.run.spec.evaluation.beam_size)
    out = []
    for k, s in enumerate(subjects):
        src, tgt = s.tokens
        out.append(Sample(seconds[k] / len(s.batches), (src + tgt) / seconds[k], greedy[k], beam[k]))
    return out


def bench(experiment: Experiment, directory: Path, options: Options,
          say: Callable[[str], None] = print) -> tuple[SpeedRecord, Path]:  # fmt: skip
    """Benches every run of `experiment` on this machine and writes `directory`/speed.json (speed.cuda.json on a
    GPU); the record and its path."""
    began, clock = datetime.now(timezone.utc), time.perf_counter()
    device = torch.device("cuda" if options.device == "cuda" else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("ablate bench --device cuda: no GPU is visible here")
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    arms: dict[str, Run] = {}
    for run in experiment.runs:  # a learning-rate sweep's rates of one run train alike: its first rate stands for all
        arms.setdefault(run.arm or run.name, run)
    runs = list(arms.values())
    subjects = [Subject.of(run, device, options) for run in runs]
    weights = {s.run.name: _trained(directory, s.run) for s in subjects} if options.weights == "trained" else {}
    if options.weights == "trained" and not any(weights.values()):
        raise UserError(f"ablate bench --weights trained: no run of {experiment.name} has a checkpoint under "
                        f"{directory}")  # fmt: skip
    say(f"{experiment.name}: {len(subjects)} runs on {device_name(device)}; peak memory of each")
    memory = {s.run.name: _peak_memory(s, weights.get(s.run.name)) for s in subjects}
    for s in subjects:
        s.build(weights.get(s.run.name))
        model = s.model
        assert model is not None
        vocab = (len(s.data.src_vocab), len(s.data.tgt_vocab))
        flop_model = FlopModel.cached(model, s.run.spec.model.model_dump_json(), vocab, device)
        s.flops_per_update = sum(flop_model.batch(lengths(s.data.train), b, s.trainer.width if s.trainer else None)
                                 for u in s.updates for b in u) / len(s.updates)  # fmt: skip
    deadline = clock + options.max_seconds  # from the start: set-up and warm-up count
    rounds, meter = 0, CoreShare()
    for number in range(options.max_rounds + 1):
        samples = one_round(subjects, number <= options.decode_rounds, number)
        rounds = number
        if number == 0:  # the first round builds each shape's kernels: not counted
            meter.start()
            continue
        for s, sample in zip(subjects, samples, strict=True):
            s.samples.append(sample)
        widest, name = _widest(subjects)
        say(f"  round {number}{_width_words(widest, name)}")
        if number >= options.min_rounds and widest <= options.target:
            break
        if time.perf_counter() > deadline:
            say(f"  stopped at {options.max_seconds:.0f} s, the time allowed")
            break
    share = _core_share(meter, torch.get_num_threads() if device.type == "cpu" else 1) if rounds else None
    record = _record(experiment, subjects, memory, rounds, options, device, began, time.perf_counter() - clock,
                     share)  # fmt: skip
    for line in _warnings(record):
        say(f"  {line}")
    for s in subjects:
        s.free()
    return record, write_speed(directory, record)


BUSY = 0.9  # a core share under this is said: other processes took a tenth of the bench's cores or more


def _widest(subjects: Sequence[Subject]) -> tuple[float, str | None]:
    """The widest interval of a ratio to the baseline (its half-width, relative) and its run; (0, None) for a
    baseline alone."""
    widths = [(_half_width([x.tokens_per_s for x in s.samples], subjects[0]), s.run.arm or s.run.name)
              for s in subjects[1:]]  # fmt: skip
    return max(widths, default=(0.0, None))


def _width_words(widest: float, name: str | None) -> str:
    """A round's line after `round N`: the widest interval, as far as the rounds so far can tell it."""
    if name is None:
        return ""
    if not math.isfinite(widest):
        return ": no interval yet (it takes two rounds)"
    if widest >= 1:  # two rounds' t quantile is 12.7: a spread of a few percent reads as hundreds
        return f": widest interval of a ratio wider than ±100% ({name}): too few rounds to tell"
    return f": widest interval of a ratio ±{widest:.1%} ({name})"


def _core_share(meter: CoreShare, threads: int) -> float | None:
    """The share of the `threads` cores the bench computes on that other processes left it over the counted rounds:
    CoreShare's share of every core this process may use, less what others ran on the cores the bench leaves free
    (a bench of 1 thread on 2 cores does not count a neighbour on the other core)."""
    share = meter.stop()
    if share is None:
        return None
    cores = len(meter.cores)
    used = max(1, min(threads, cores))
    others = (1 - share) * cores - (cores - used)  # cores' worth of others' time beyond the free cores
    return round(1 - max(0.0, others) / used, 3)


def _warnings(record: SpeedRecord) -> list[str]:
    """Lines for what the record's numbers cannot show: the target not reached, other processes on the cores."""
    lines = []
    widths = [(r.ratio.high / r.ratio.estimate - 1, r.run) for r in record.runs if r.ratio is not None]
    if not record.reached and widths:
        width, name = max(widths)
        said = f"±{width:.1%}" if width < 1 else "wider than ±100%"
        lines.append(f"target not reached: the widest interval of a ratio is {said} ({name}) after {record.rounds} "
                     f"rounds, not ±{record.target:.0%}; more --max-minutes or --max-rounds narrow it")  # fmt: skip
    if record.core_share is not None and record.core_share < BUSY:
        lines.append(f"warning: other processes took {1 - record.core_share:.0%} of the bench's cores during its "
                     f"rounds (core share {record.core_share:.2f}): its intervals widen, and a neighbour that comes "
                     "and goes can tip a ratio; bench on a quiet machine")  # fmt: skip
    return lines


def _trained(directory: Path, run: Run) -> Path | None:
    """The run's last checkpoint (its first seed's), where this machine has it."""
    found = last_checkpoint(job_dir(directory, run.name, run.spec.training.seed), None)
    return None if found is None else found.state


def _peak_memory(subject: Subject, weights: Path | None) -> float | None:
    """The most memory one round of the run takes (training, then decoding): on CUDA the allocator's peak above
    what was allocated before; on a CPU the peak resident memory of a process forked for it."""
    if subject.device.type == "cuda":
        torch.cuda.synchronize(subject.device)
        before = torch.cuda.memory_allocated(subject.device)
        torch.cuda.reset_peak_memory_stats(subject.device)
        subject.build(weights)
        one_round([subject])
        peak = torch.cuda.max_memory_allocated(subject.device) - before
        subject.free()
        torch.cuda.empty_cache()
        return round(peak / 2**20, 1)

    def probe() -> float:
        reset_peak_memory(subject.device)
        subject.build(weights)
        one_round([subject])
        return peak_memory_mib(subject.device)

    return _forked(probe)


def _forked(work: Callable[[], float]) -> float | None:
    """`work()` in a child process (its memory its own), its value read back through a pipe; None where fork is
    not offered (not POSIX)."""
    if not hasattr(os, "fork"):
        return None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        try:
            message = {"value": work()}
        except BaseException as error:  # the parent reports it
            message = {"error": f"{type(error).__name__}: {error}"}
        os.write(write, json.dumps(message).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    message = json.loads(data or b'{"error": "the process ended without a word"}')
    if "error" in message:
        raise RuntimeError(f"measuring peak memory: {message['error']}")
    return float(message["value"])


def _ratio(values: Sequence[float], base: Sequence[float], level: float = 0.95) -> Ratio | None:
    """The geometric mean of round-paired ratios, with its t interval over rounds (95% unless `level` says)."""
    logs = [math.log(v / b) for v, b in zip(values, base, strict=True) if v and b]
    if not logs:
        return None
    mean = statistics.fmean(logs)
    half = _t_half(logs, level)
    return Ratio(estimate=round(math.exp(mean), 4), low=round(math.exp(mean - half), 4),
                 high=round(math.exp(mean + half), 4), rounds=len(logs))  # fmt: skip


def _t_half(logs: Sequence[float], level: float = 0.95) -> float:
    """The half-width of the `level` t interval of the mean of `logs`; infinite with fewer than two."""
    from ablate.report.significance import t_ppf

    if len(logs) < 2:
        return math.inf
    return float(t_ppf(0.5 + level / 2, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))


def _half_width(values: Sequence[float], base: Subject) -> float:
    """A ratio's interval half-width, relative (0.03: ±3%)."""
    logs = [math.log(v / b.tokens_per_s) for v, b in zip(values, base.samples, strict=True)]
    return math.expm1(_t_half(logs))


def _record(experiment: Experiment, subjects: list[Subject], memory: dict[str, float | None], rounds: int,
            options: Options, device: torch.device, began: datetime, seconds: float,
            share: float | None = None) -> SpeedRecord:  # fmt: skip
    peak = peak_flops(device, subjects[0].precision, options.threads) if subjects else None
    base = subjects[0]
    runs = []
    for s in subjects:
        src, tgt = s.tokens
        step = statistics.median(x.step_seconds for x in s.samples)
        rate = statistics.median(x.tokens_per_s for x in s.samples)
        per_update = s.flops_per_update
        achieved = per_update / step if per_update is not None else None
        run_peak = peak_flops(device, s.precision, options.threads)
        greedy = [x.greedy_per_s for x in s.samples if x.greedy_per_s is not None]
        beam = [x.beam_per_s for x in s.samples if x.beam_per_s is not None]
        base_beam = [x.beam_per_s for x in base.samples if x.beam_per_s is not None]
        assert s.model is not None
        runs.append(RunSpeed(
            run=s.run.arm or s.run.name, config_hash=config_hash(s.run.spec.model_dump(mode="json")),
            precision=s.precision, params=count_parameters(s.model),
            updates=len(s.updates), tokens_per_update=round((src + tgt) / len(s.updates), 1),
            step_ms=round(1000 * step, 2), tokens_per_s=round(rate, 1),
            gflop_per_target_token=significant(per_update * len(s.updates) / tgt / 1e9) if per_update else None,
            tflops_per_s=significant(achieved / 1e12) if achieved else None,
            mfu=significant(achieved / run_peak) if achieved else None,
            greedy_sentences_per_s=round(statistics.median(greedy), 1) if greedy else None,
            beam_sentences_per_s=round(statistics.median(beam), 1) if beam else None,
            peak_memory_mib=memory.get(s.run.name),
            rounds_tokens_per_s=[round(x.tokens_per_s, 1) for x in s.samples],
            ratio=None if s is base else _ratio([x.tokens_per_s for x in s.samples],
                                                [x.tokens_per_s for x in base.samples]),
            beam_ratio=None if s is base or not beam or not base_beam else _ratio(beam, base_beam),
        ))  # fmt: skip
    ratios = [r.ratio for r in runs if r.ratio is not None]
    reached = all(r.high / r.estimate - 1 <= options.target + 1e-9 for r in ratios)
    first = subjects[0] if subjects else None
    split = first.run.spec.data.test[0] if first and first.run.spec.data.test else None
    return SpeedRecord(
        experiment=experiment.name, machine=device_name(device), device_type=device.type,
        threads=torch.get_num_threads() if device.type == "cpu" else None, torch=torch.__version__,
        python=platform.python_version(), host=socket.gethostname(), started_at=began.isoformat(timespec="seconds"),
        seconds=round(seconds, 1), rounds=rounds, target=options.target, reached=reached, core_share=share,
        decode_split=split,
        decode_sentences=len(first.slice_ids) if first else 0, decode_rounds=min(options.decode_rounds, rounds),
        weights=options.weights,
        peak_tflops=significant(peak / 1e12) if peak else None, runs=runs,
    )  # fmt: skip
