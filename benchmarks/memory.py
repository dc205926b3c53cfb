"""Where a base run's peak memory comes from: the resident set of ablate's own pipeline, phase by phase.

Runs one job of experiments/base.yaml's baseline in this process, through the same `train_and_evaluate`
that a worker calls, with a thread that samples the resident set (VmRSS) every few milliseconds. Each of the
pipeline's phases (loading data, building the model, the FLOP probes, training steps, validation,
diagnostics, checkpoints, averaging, decoding) is wrapped so that the sampler knows which one runs: the
table gives each phase's highest resident set and what it added over the phase before it. The worker's
`peak MiB` (VmHWM after the model is built) is printed below, as a run's result.json would have it.

    python benchmarks/memory.py [--precision fp32|bf16] [--steps 100] [--threads N] [--set KEY=VALUE ...]

Training steps are few by default: memory does not grow with steps (checkpoints are averaged from disk),
and `--steps` shows whether it does.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

PHASES = [  # (module, attribute, phase): what is wrapped, and the phase it is
    ("ablate.train.pipeline", "load_dataset", "data and tokenizer"),
    ("ablate.train.pipeline", "build_model", "model"),
    ("ablate.train.flops", "FlopModel.cached", "FLOP probes"),
    ("ablate.train.pipeline", "Pipeline.initial_loss", "validation loss"),
    ("ablate.train.evaluation", "validation_loss", "validation loss"),
    ("ablate.train.evaluation", "translate", "greedy decoding (validation BLEU)"),
    ("ablate.train.pipeline", "measure", "diagnostics"),
    ("ablate.train.checkpoints", "save", "checkpoints"),
    ("ablate.train.checkpoints", "averaged_weights", "checkpoint averaging"),
    ("ablate.train.pipeline", "Pipeline.evaluate", "beam decoding and scoring"),
]
LAST = "beam decoding and scoring"  # after it, the run has ended


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    """Per phase, the resident set when it first began and the highest one during it, sampled every `every` s."""

    def __init__(self, every: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.every, self.phase, self.done = every, "start-up", False
        self.outer: list[str] = []  # the phases that the one running was called from
        self.entered: dict[str, float] = {}
        self.peaks: dict[str, float] = {}

    def run(self) -> None:
        while not self.done:
            self.note()
            time.sleep(self.every)

    def note(self) -> None:
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), rss_mib())

    @contextmanager
    def during(self, phase: str):
        """`phase` runs; a phase called from another (decoding's `translate`) counts as itself, then the outer
        one goes on. Between the outermost phases the run trains, until it has been decoded."""
        if self.outer or self.phase in {p for _, _, p in PHASES}:
            self.outer.append(self.phase)
        self.phase = phase
        self.entered.setdefault(phase, rss_mib())
        self.note()
        try:
            yield
        finally:
            self.note()
            if self.outer:
                self.phase = self.outer.pop()
            else:
                self.phase = "after decoding" if phase == LAST else "training steps"


def wrap(sampler: Sampler) -> None:
    """Replaces each of PHASES' functions with one that tells the sampler which phase runs."""
    import importlib

    for module, attribute, phase in PHASES:
        owner = importlib.import_module(module)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)

        def wrapped(*args, _original=original, _phase=phase, _name=name, **kwargs):
            if _name == "translate" and kwargs.get("beam_size") != 1:  # the test sets' beam search: its own phase
                return _original(*args, **kwargs)
            with sampler.during(_phase):
                return _original(*args, **kwargs)

        setattr(owner, name, wrapped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--sentences",
        type=int,
        default=None,
        help="decode only the first N test sentences (the batch, hence the memory, is the same)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as ablate run --set")
    args = parser.parse_args()
    sampler = Sampler()
    sampler.start()
    from ablate.train.worker import bound_primitive_caches

    bound_primitive_caches()  # as a worker does, before torch loads
    import torch

    from ablate.sweep.experiment import load_experiment
    from ablate.sweep.plan import job_of
    from ablate.train.device import Placement
    from ablate.train.pipeline import train_and_evaluate

    wrap(sampler)
    if args.sentences:
        import ablate.train.pipeline as pipeline

        prepare = pipeline.Pipeline.prepare

        def fewer(self):
            setup = prepare(self)
            tests = {name: pairs[: args.sentences] for name, pairs in self.data.tests.items()}
            self.data = dataclasses.replace(self.data, tests=tests)
            return setup

        pipeline.Pipeline.prepare = fewer
    every = max(args.steps // 5, 1)  # five checkpoints to average, as the base recipe averages five
    overrides = [f"training.precision={args.precision}", f"training.max_steps={args.steps}",
                 f"training.validate_every={every * 2}", f"training.checkpoint_every={every}", *args.set]  # fmt: skip
    experiment = load_experiment("experiments/base.yaml", overrides)
    with tempfile.TemporaryDirectory() as tmp:
        job = job_of(experiment, experiment.baseline, 1, Path(tmp))
        job.threads = args.threads
        job.directory.mkdir(parents=True)
        job.save()
        sampler.phase = "start-up"
        placement = Placement.of("cpu", 0, job.spec["training"]["precision"], args.threads)
        measured = train_and_evaluate(job, placement, lambda: False)
    sampler.done = True
    sampler.join()
    setup = measured.setup
    assert setup is not None, measured.ending
    print(f"{setup.device}, torch {torch.__version__}, {setup.precision}; base recipe, {args.steps} steps, "
          f"{setup.params:,} parameters")  # fmt: skip
    print(f"{'phase':<28} {'RSS at its start':>17} {'peak RSS':>9} {'added':>6}  (MiB)")
    for phase in ["start-up", *dict.fromkeys(p for _, _, p in PHASES), "training steps", "after decoding"]:
        if phase in sampler.peaks:
            start = sampler.entered.get(phase, sampler.peaks["start-up"])
            peak = sampler.peaks[phase]
            print(f"{phase:<28} {start:>17.0f} {peak:>9.0f} {peak - start:>+6.0f}")
    peak = measured.footprint.peak_memory_mib
    print(f"the run's peak MiB (VmHWM since the model was built, as result.json): {peak:.0f}")


if __name__ == "__main__":
    main()
