"""torch.compile on bucketed shapes: a compiled bf16 training step against eager where compiling is easiest.

With training.shape_buckets an epoch has two batch shapes a bucket (ablate/data/batches.py), so
`torch.compile(model, dynamic=False)` needs a graph a shape, compiled once. This measures the best case for
it: batches of one shape, the most common of an epoch (different sentences, the same shape), ablate's own
Trainer with its defaults but precision (bf16 unless `--precision fp32`), eager and compiled arms from the
same weights, their steps alternating. It prints the compile seconds of the first step, the graphs dynamo
built, each arm's median ms a step, and how many shapes an epoch has: what a run would pay in compiles.

    python benchmarks/compile_buckets.py [--experiment experiments/base.yaml] [--steps 20] [--warmup 3]
        [--threads N] [--precision bf16|fp32]
"""

from __future__ import annotations

import argparse
import collections
import copy
import statistics
import time

from ablate.train.worker import bound_primitive_caches

bound_primitive_caches()  # as a worker trains: before torch loads, unless the environment sets them

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from defaults import default_kernels  # noqa: E402  (benchmarks/defaults.py)

from ablate.data.batches import batch_indices, collate  # noqa: E402
from ablate.data.dataset import load_dataset  # noqa: E402
from ablate.data.tokenizer import PAD  # noqa: E402
from ablate.model.transformer import build_model  # noqa: E402
from ablate.sweep.experiment import load_experiment  # noqa: E402
from ablate.train.device import device_name  # noqa: E402
from ablate.train.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/base.yaml")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each arm")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each arm first (the compile)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = [*default_kernels(), "training.shape_buckets=8", f"training.precision={args.precision}",
                 "training.checkpoint_every=null", "evaluation.average_checkpoints=1"]  # fmt: skip
    spec = load_experiment(args.experiment, overrides).baseline.spec
    training = spec.training
    data = load_dataset(spec.data, spec.tokenizer)
    width = training.shape_buckets
    epoch = batch_indices(data.train, training.max_tokens, training.seed * 100_003, width)
    shape_of = [tuple(collate([data.train[i] for i in b], width).src.shape) for b in epoch]
    shapes = collections.Counter(shape_of)
    (shape, count), n = shapes.most_common(1)[0], args.warmup + args.steps
    same = [b for b, s in zip(epoch, shape_of, strict=True) if s == shape]
    batches = [collate([data.train[i] for i in same[k % len(same)]], width) for k in range(n)]
    torch.manual_seed(1)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD)
    trainers = {"eager": Trainer(copy.deepcopy(model), training, spec.model.d_model)}
    compiled = Trainer(copy.deepcopy(model), training, spec.model.d_model)
    compiled.forward = torch.compile(compiled.model, dynamic=False)
    trainers["compiled, dynamic=False"] = compiled
    torch._dynamo.reset()
    times: dict[str, list[float]] = {name: [] for name in trainers}
    first: dict[str, float] = {}
    for i, batch in enumerate(batches):
        for name in list(trainers)[i % 2 :] + list(trainers)[: i % 2]:
            start = time.perf_counter()
            trainers[name].train_step([batch])
            elapsed = time.perf_counter() - start
            if i == 0:
                first[name] = elapsed
            if i >= args.warmup:
                times[name].append(elapsed)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    print(f"{device_name(torch.device('cpu'))}, torch {torch.__version__}, {args.precision}; {args.experiment}'s "
          f"baseline with ablate's defaults; batches of shape {shape} (B, L), {count} of the epoch's {len(epoch)}; "
          f"the epoch has {len(shapes)} shapes")  # fmt: skip
    print(f"dynamo built {graphs} graph(s); {args.steps} timed steps an arm after {args.warmup}")
    print(f"{'arm':<26} {'first step s':>12} {'median ms':>10} {'min ms':>8} {'vs eager':>9}")
    eager = statistics.median(times["eager"])
    for name, t in times.items():
        print(f"{name:<26} {first[name]:>12.1f} {statistics.median(t) * 1000:>10.1f} {min(t) * 1000:>8.1f} "
              f"{eager / statistics.median(t):>8.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
