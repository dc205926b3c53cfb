"""Issue 23's levers on a base-recipe training step, each as a ratio against ablate's step as it is, side by side.

Every arm is ablate's own Trainer on experiments/base.yaml's model (or `--experiment`'s baseline), from the same
initial weights, fed the same Multi30k batches in the same order (the buckets lever cuts its own); the arms'
steps alternate in one process, the order rotating each round, so the machine's noise falls on all of them.
"As is" is the recipe as the experiment file says: experiments/base.yaml pins the kernels the committed evidence
was trained with (torch's dropout, loss and Adam; no buckets). An arm pulls levers:

    foreach Adam       training.adam_kernel foreach: one kernel over all parameters a step, not one each
    fused Adam         training.adam_kernel fused: Adam's update as one fused kernel per parameter group
    compiled           torch.compile(model, dynamic=True): inductor's C++ kernels for the forward and backward
                       (compile time is spent in warm-up, not timed; it is printed)
    bf16               training.precision bf16 (autocast) on torch's own bf16 kernels: oneDNN's where the CPU has
                       native bf16, elsewhere torch's generic GEMM, which is slow
    emulated           bf16's matmuls by fp32 kernels from the bf16 operands, rounded to bf16 (ablate/train/bf16.py):
                       what a run computes where the CPU has no native bf16 (bf16-emulated; on a CPU with native bf16
                       it compares the emulation with oneDNN's kernels)
    bf16-attention     bf16 autocast with torch's bf16 attention kernel, as ablate had it until it computed
                       attention in fp32 on the CPU (`sdpa`, ablate/parts/attention.py): a third of a bf16 step
                       was spent in that kernel on a Zen 4
    bf16-compiled      bf16 autocast and torch.compile(model, dynamic=True) (issue 37: the element-wise quarter
                       of a bf16 step is what inductor fuses)
    bf16-fused         bf16 autocast and training.adam_kernel fused
    bf16-foreach       bf16 autocast and training.adam_kernel foreach
    bits16             model.dropout_sampler bits16: dropout masks from 16 random bits an element, not torch's
                       Bernoulli draw an element (ablate/parts/dropout.py)
    buckets            training.shape_buckets 8: every batch padded to a multiple of 8 tokens on both sides, with
                       max_tokens // length pairs (ablate/data/batches.py), its own batches: the ratio is of
                       real target tokens a second
    chunked            training.cross_entropy chunked: the label-smoothed loss 64 rows at a time (more under
                       4,096 words) with a one-pass backward, no fp32 copy of the logits (ablate/train/loss.py)
    graphs             training.cuda_graphs true (--device cuda, with buckets): each batch shape's whole update
                       replayed as a CUDA graph (ablate/train/graphs.py); every other arm on CUDA is eager

On CUDA (--device cuda) an arm's step is timed to its end (the loss read back, as a run reads it every step
when it has budget points), and the default arms are the converged recipe's step eager and as CUDA graphs:

    python benchmarks/levers.py --device cuda --experiment experiments/converged.yaml --set training.precision=bf16

An arm may join any levers with '-' (bf16-bits16-fused); those above are the default set.

It prints each arm's median ms a step, its real target tokens a second, and that throughput relative to "as
is" (> 1: the lever wins). oneDNN's primitive caches are capped as a worker caps them (ablate/train/worker.py)
unless the environment sets them: a bf16 matmul of a new shape builds a kernel, and a capped cache rebuilds
kernels for shapes it dropped.

    python benchmarks/levers.py [--experiment experiments/base.yaml] [--arms foreach,fused,compiled,bf16,...]
                                [--steps 20] [--warmup 5] [--threads N]

oneDNN's primitive cache, a lever on memory, is read once when torch loads, so it cannot be an arm here:
benchmarks/primitive_cache.py compares it.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

from ablate.train.worker import PRIMITIVE_CACHES, bound_primitive_caches

bound_primitive_caches()  # as a worker trains: before torch loads, unless the environment sets them

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from defaults import NOT_TIMED  # noqa: E402  (benchmarks/defaults.py)

import ablate.parts.attention  # noqa: E402
from ablate.data.batches import batch_indices, collate  # noqa: E402
from ablate.data.dataset import load_dataset  # noqa: E402
from ablate.data.tokenizer import PAD  # noqa: E402
from ablate.model.transformer import build_model  # noqa: E402
from ablate.parts.attention import sdpa  # noqa: E402
from ablate.parts.dropout import use_sampler  # noqa: E402
from ablate.sweep.experiment import load_experiment  # noqa: E402
from ablate.train.bf16 import EmulatedBf16Matmuls  # noqa: E402
from ablate.train.device import Placement, device_name  # noqa: E402
from ablate.train.trainer import Trainer  # noqa: E402

LEVERS = ("bf16", "foreach", "fused", "compiled", "attention", "emulated", "bits16", "chunked", "buckets", "graphs")
ARMS = ("foreach", "fused", "compiled", "bits16", "chunked", "buckets", "bf16", "bf16-emulated", "bf16-attention",
        "bf16-compiled", "bf16-fused", "bf16-foreach", "bf16-bits16", "bf16-chunked", "bf16-buckets",
        "bf16-bits16-chunked-fused", "bf16-bits16-chunked-fused-buckets")  # fmt: skip
CUDA_ARMS = ("buckets-graphs",)  # with --set training.precision=bf16: the converged recipe's step as graphs


def trainer(arm: str, model: torch.nn.Module, spec, d_model: int, device: torch.device) -> Trainer:
    """ablate's Trainer with the arm's levers pulled (none, for "as is"): an arm names them joined by '-'."""
    levers = set(arm.split("-")) - {"as is"}
    spec = spec.model_copy(update={"cuda_graphs": "graphs" in levers})
    if "bf16" in levers:
        spec = spec.model_copy(update={"precision": "bf16"})
    for kernel in ("foreach", "fused"):
        if kernel in levers:
            spec = spec.model_copy(update={"adam_kernel": kernel})
    if "chunked" in levers:
        spec = spec.model_copy(update={"cross_entropy": "chunked"})
    if "buckets" in levers:
        spec = spec.model_copy(update={"shape_buckets": 8})
    if "bits16" in levers:
        use_sampler(model, "bits16")
    t = Trainer(model.to(device), spec, d_model, Placement.of(device.type, 0, spec.precision, None))
    if "compiled" in levers:
        t.forward = torch.compile(model, dynamic=True)
    if "emulated" in levers:  # the whole step, its backward's products included
        emulated_step = t.train_step

        def train_step(batches):
            with EmulatedBf16Matmuls():
                return emulated_step(batches)

        t.train_step = train_step
    if "attention" in levers:  # the attention module's `sdpa` is torch's own, for this arm's steps only
        step = t.train_step

        def train_step(batches):
            ablate.parts.attention.sdpa = F.scaled_dot_product_attention
            try:
                return step(batches)
            finally:
                ablate.parts.attention.sdpa = sdpa

        t.train_step = train_step
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/base.yaml")
    parser.add_argument("--arms", default=None, help=f"levers to compare with 'as is' (default on the CPU: "
                        f"{', '.join(ARMS)}; on CUDA: {', '.join(CUDA_ARMS)})")  # fmt: skip
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each arm")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each arm first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="as ablate run --set, on the recipe: what 'as is' is (e.g. the kernels an experiment file "
                        "that does not extend experiments/base.yaml leaves at ablate's defaults)")  # fmt: skip
    args = parser.parse_args()
    arms = [a for a in (args.arms or ",".join(CUDA_ARMS if args.device == "cuda" else ARMS)).split(",") if a]
    if unknown := sorted({lever for a in arms for lever in a.split("-")} - set(LEVERS)):
        parser.error(f"--arms: no lever {', '.join(unknown)}; an arm joins some of {', '.join(LEVERS)} with '-'")
    for lever in ("attention", "emulated"):
        if bad := [a for a in arms if lever in a.split("-") and "bf16" not in a.split("-")]:
            parser.error(f"--arms: {', '.join(bad)}: the {lever} lever is bf16's; join it to bf16 (bf16-{lever})")
    if bad := [a for a in arms if "graphs" in a.split("-") and (args.device != "cuda" or "buckets" not in a)]:
        parser.error(f"--arms: {', '.join(bad)}: graphs need --device cuda and the buckets lever (few shapes)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    overrides = ["training.precision=fp32", "training.validate_every=100000", "training.checkpoint_every=null",
                 "training.diagnostics_every=0", "evaluation.average_checkpoints=1", *NOT_TIMED, *args.set]  # fmt: skip
    spec = load_experiment(args.experiment, overrides).baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)
    torch.manual_seed(1)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD)
    trainers = {name: trainer(name, copy.deepcopy(model), spec.training, spec.model.d_model, device)
                for name in ["as is", *arms]}  # fmt: skip
    batches = {name: first_batches(data.train, t, args.warmup + args.steps) for name, t in trainers.items()}
    times: dict[str, list[float]] = {name: [] for name in trainers}
    tokens: dict[str, int] = dict.fromkeys(trainers, 0)
    warmup: dict[str, float] = dict.fromkeys(trainers, 0.0)
    order = list(trainers)
    for i in range(args.warmup + args.steps):
        for name in order[i % len(order) :] + order[: i % len(order)]:  # rotate who goes first
            batch = batches[name][i]
            start = time.perf_counter()
            trainers[name].train_step([batch])
            elapsed = time.perf_counter() - start
            if i < args.warmup:
                warmup[name] += elapsed
            else:
                times[name].append(elapsed)
                tokens[name] += batch.tgt_tokens
    model_spec = spec.model
    caches = ", ".join(f"{v}={os.environ.get(v, 'default')}" for v in PRIMITIVE_CACHES)
    print(f"{device_name(device)}, torch {torch.__version__}, {caches}; {args.experiment}'s baseline "
          f"(d_model {model_spec.d_model}, {model_spec.encoder_layers}+{model_spec.decoder_layers} layers, "
          f"<= {spec.training.max_tokens} tokens a batch), {args.steps} timed steps an arm after "
          f"{args.warmup}")  # fmt: skip
    median = {name: statistics.median(t) for name, t in times.items()}
    rate = {name: tokens[name] / sum(times[name]) for name in trainers}  # real target tokens a second
    print(f"{'arm':<26} {'median ms':>10} {'min ms':>8} {'tgt tok/s':>10} {'vs as is':>9} {'warm-up s':>10}")
    for name in trainers:
        print(f"{name:<26} {median[name] * 1000:>10.1f} {min(times[name]) * 1000:>8.1f} {rate[name]:>10,.0f} "
              f"{rate[name] / rate['as is']:>8.2f}x {warmup[name]:>10.1f}")  # fmt: skip


def first_batches(examples, trainer: Trainer, n: int) -> list:
    """The first `n` batches of the first epoch as `trainer` cuts them: with length buckets, its own."""
    spec = trainer.spec
    indices = batch_indices(examples, spec.max_tokens, spec.seed * 100_003, trainer.width)
    return [collate([examples[i] for i in b], trainer.width) for b in indices[:n]]


if __name__ == "__main__":
    main()
