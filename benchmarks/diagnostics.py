"""What diagnostics cost: a diagnostic measurement against a training step of the same run, side by side.

Builds an experiment's baseline (default experiments/base.yaml) on its real data, then alternates, in one
process, a training step (Trainer.train_step on the run's own batches, in the run's precision) and a
diagnostic measurement (ablate.diagnostics.measure on the fixed validation batch the pipeline uses:
explicit-softmax forward, backward through autograd.grad), so that the machine's noise falls on both.
It prints their medians and the overhead on a whole run: the measurements the run makes (initialisation,
one per validation, the end) times the cost of one, over its steps times the cost of a step.
The target: at most 3% of training time.

    python benchmarks/diagnostics.py [--experiment experiments/base.yaml] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import ablate
from ablate.data.batches import collate
from ablate.data.dataset import load_dataset
from ablate.data.tokenizer import PAD
from ablate.model.diagnostics import fixed_batch, measure
from ablate.train.device import Placement
from ablate.train.spec import VALIDATIONS
from ablate.train.trainer import Trainer, autocast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/base.yaml")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    spec = ablate.load_experiment(args.experiment).baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)
    torch.manual_seed(spec.training.seed)
    model = ablate.build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD)
    placement = Placement.of("cpu", 0, spec.training.precision, None)
    device = placement.device
    trainer = Trainer(model, spec.training, spec.model.d_model, placement)
    updates = trainer.updates(data.train, epoch=0)
    probe = fixed_batch(data.valid, spec.training.max_tokens)
    amp = autocast(device, placement.precision)

    step_s, diag_s = [], []
    for i in range(args.repeats + 2):  # the first two of each warm up
        update = updates[i % len(updates)]
        batches = [collate([data.train[j] for j in b]) for b in update]
        start = time.perf_counter()
        trainer.train_step(batches)
        step_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        measure(model, probe, spec.training.label_smoothing, amp)
        diag_s.append(time.perf_counter() - start)
    step, diag = statistics.median(step_s[2:]), statistics.median(diag_s[2:])

    training = spec.training
    steps = training.max_steps or 0
    validations = (steps // training.validate_every) if training.validate_every else VALIDATIONS - 1
    every = training.diagnostics_every
    measurements = 0 if every == 0 else 2 + (steps // every if every else validations)  # init and end too
    overhead = measurements * diag / (steps * step) if steps else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{placement.precision}; {args.experiment}: d_model {spec.model.d_model}, "
          f"{spec.model.encoder_layers}+{spec.model.decoder_layers} layers, probe batch {tuple(probe.src.shape)}, "
          f"training batches of {training.max_tokens} tokens; median of {args.repeats}")  # fmt: skip
    print(f"training step     {1000 * step:8.1f} ms")
    print(f"diagnostics       {1000 * diag:8.1f} ms  ({diag / step:.2f} training steps)")
    verdict = "met" if overhead <= 0.03 else "MISSED"
    print(f"a run of {steps} steps measures {measurements} times: overhead {100 * overhead:.2f}% of its training "
          f"steps' time (target <= 3%: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
