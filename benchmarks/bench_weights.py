"""Whether `ablate bench` may time untrained weights: one run timed with its seeded initialisation and with its
trained weights, side by side in one process (ablate.sweep.bench's rounds, each update of one then the other).

Speed should depend on the shapes, kernels and output lengths alone, not on the weights' values (denormal
floats, say, would make it depend). The bench forces every decoded sentence to its source's length, so decoding
does the same work too. It prints each one's ms an update and beam sentences a second, and the ratio trained /
initial with its 95% interval over rounds; 1 inside the interval is what lets the bench do without checkpoints.

    python benchmarks/bench_weights.py EXPERIMENT.yaml --results DIR [--run baseline] [--rounds 6] [--threads 1]

DIR/<experiment>/runs/<run>/seed-<seed>/checkpoints/ must hold a checkpoint (a run that has trained, or is training).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ablate.rundir import job_dir, last_checkpoint
from ablate.sweep.bench import Options, Subject, _ratio, one_round
from ablate.sweep.experiment import load_experiment
from ablate.train.device import device_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--run", default="baseline")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    experiment = load_experiment(args.experiment)
    run = experiment.run(args.run)
    directory = job_dir(args.results / experiment.name, run.name, run.spec.training.seed)
    found = last_checkpoint(directory, None)
    if found is None:
        raise SystemExit(f"{directory}: no checkpoint")
    weights = found.state
    options = Options(threads=args.threads, updates=args.updates, decode_sentences=args.sentences)
    initial, trained = (Subject.of(run, torch.device("cpu"), options) for _ in range(2))
    initial.build()
    trained.build(weights)
    step = torch.load(weights, map_location="cpu", weights_only=True)["step"]
    print(f"{experiment.name}/{run.name} on {device_name(torch.device('cpu'))}: initial weights against step {step}'s")
    for number in range(args.rounds + 1):
        samples = one_round([initial, trained])
        if number:  # the first round warms up
            initial.samples.append(samples[0])
            trained.samples.append(samples[1])
            print(f"  round {number}: ms an update {samples[0].step_seconds * 1000:.0f} / "
                  f"{samples[1].step_seconds * 1000:.0f}, beam sent/s {samples[0].beam_per_s:.1f} / "
                  f"{samples[1].beam_per_s:.1f}")  # fmt: skip
    train = _ratio([s.tokens_per_s for s in trained.samples], [s.tokens_per_s for s in initial.samples])
    beam = _ratio([s.beam_per_s or 0.0 for s in trained.samples], [s.beam_per_s or 0.0 for s in initial.samples])
    for name, ratio in (("training tokens/s", train), ("beam sentences/s", beam)):
        assert ratio is not None
        print(f"trained / initial, {name}: {ratio.estimate:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] over "
              f"{ratio.rounds} rounds")  # fmt: skip


if __name__ == "__main__":
    main()
