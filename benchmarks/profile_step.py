"""Where a base-recipe training step spends its time, by torch.profiler: the breakdown benchmarks/README.md quotes.

Trains experiments/base.yaml's model on Multi30k with ablate's own Trainer (its batches, its loss, its
Adam), profiles `--steps` optimizer steps after `--warmup`, and sorts every operator's self CPU time into
what the issue asks about: matmuls, attention, softmax, norms, the loss, the optimizer, embeddings and
data, element-wise work, and what is left of the wall time: Python and the framework between kernels.

    python benchmarks/profile_step.py [--experiment experiments/base.yaml] [--precision fp32|bf16] [--threads N]
        [--steps 20] [--warmup 5] [--top N] [--defaults]

oneDNN's primitive caches are capped as a worker caps them (ablate/train/worker.py) unless the environment sets
them. experiments/base.yaml pins the kernels the committed evidence was trained with; `--defaults` profiles
ablate's own.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from ablate.train.worker import bound_primitive_caches

bound_primitive_caches()  # as a worker trains: before torch loads, unless the environment sets them

import torch  # noqa: E402
from defaults import NOT_TIMED, default_kernels  # noqa: E402  (benchmarks/defaults.py)
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

from ablate.data.batches import batch_indices, collate  # noqa: E402
from ablate.data.dataset import load_dataset  # noqa: E402
from ablate.data.tokenizer import PAD  # noqa: E402
from ablate.model.transformer import build_model  # noqa: E402
from ablate.sweep.experiment import load_experiment  # noqa: E402
from ablate.train.bf16 import bf16_matmuls  # noqa: E402
from ablate.train.device import device_name  # noqa: E402
from ablate.train.trainer import Trainer  # noqa: E402

# operator name -> category, by the first pattern it contains (self time: each op counted once)
CATEGORIES = [
    ("optimizer", ("_foreach", "adam")),
    ("attention", ("scaled_dot_product", "flash_attention", "_efficient_attention", "attention")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
    ("softmax", ("softmax",)),  # the loss's log_softmax is matched first, below
    ("norms", ("layer_norm", "rms_norm")),
    ("embedding", ("embedding",)),
]
LOSS = ("cross_entropy", "nll_loss", "log_softmax")


def category(name: str) -> str:
    lower = name.lower()
    if any(p in lower for p in LOSS):
        return "loss"
    for label, patterns in CATEGORIES:
        if any(p in lower for p in patterns):
            return label
    if lower.startswith(("aten::", "autograd::")):
        return "element-wise and other kernels"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/base.yaml", help="whose baseline to profile")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps profiled")
    parser.add_argument("--warmup", type=int, default=5, help="steps before profiling")
    parser.add_argument("--top", type=int, default=0, help="also list the N operators with the most self time")
    parser.add_argument("--defaults", action="store_true",
                        help="ablate's default kernels (benchmarks/defaults.py), not those experiments/base.yaml pins "
                        "for the committed evidence")  # fmt: skip
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = [*(default_kernels() if args.defaults else []), f"training.precision={args.precision}",
                 "training.validate_every=100000", "training.checkpoint_every=null", "evaluation.average_checkpoints=1",
                 "training.diagnostics_every=0", f"training.max_steps={args.warmup + args.steps}",
                 *NOT_TIMED]  # fmt: skip
    spec = load_experiment(args.experiment, overrides).baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)
    torch.manual_seed(1)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD)
    trainer = Trainer(model, spec.training, spec.model.d_model)
    step_ms: list[float] = []
    steps = schedule(wait=0, warmup=args.warmup, active=args.steps, repeat=1)  # one cycle, its events kept
    with (
        profile(activities=[ProfilerActivity.CPU], schedule=steps, acc_events=True, record_shapes=False) as prof,
        bf16_matmuls(trainer.device, args.precision),  # as a run computes them: emulated where bf16 is not native
    ):
        last = [time.perf_counter()]

        def on_step(progress) -> None:
            now = time.perf_counter()
            if progress.step > args.warmup:
                step_ms.append((now - last[0]) * 1000)
            last[0] = now
            prof.step()

        trainer.fit(data.train, on_step, lambda step: {}, None, lambda: False)
    by = defaultdict(float)
    for e in prof.key_averages():
        if e.key.startswith(("ProfilerStep", "Optimizer.", "autograd::engine::evaluate_function")):
            continue  # ranges, not kernels: their ops are counted themselves
        by[category(e.key)] += e.self_cpu_time_total / 1000
    optimizer_ms = sum(e.cpu_time_total for e in prof.events() if e.name.startswith("Optimizer.step")) / 1000
    kernels = sum(by.values())
    wall = sum(step_ms)
    print(f"{device_name(trainer.device)}, torch {torch.__version__}, {args.precision}; {args.experiment}'s baseline "
          f"(d_model {spec.model.d_model}, {spec.model.encoder_layers}+{spec.model.decoder_layers} layers, "
          f"<= {spec.training.max_tokens} tokens a batch), {len(step_ms)} steps, "
          f"median {sorted(step_ms)[len(step_ms) // 2]:.1f} ms a step")  # fmt: skip
    print(f"{'where':<34} {'ms':>9} {'share':>7}")
    rows = sorted(by.items(), key=lambda kv: -kv[1])
    for name, ms in rows:
        print(f"{name:<34} {ms:>9.1f} {ms / wall:>7.1%}")
    print(f"{'the optimizer (Optimizer.step, total)':<34} {optimizer_ms:>9.1f} {optimizer_ms / wall:>7.1%}")
    print(f"{'Python, data and framework between':<34} {wall - kernels:>9.1f} {(wall - kernels) / wall:>7.1%}")
    print(f"{'wall time of the profiled steps':<34} {wall:>9.1f} {1:>7.1%}")
    if args.top:
        print(f"{'operator (self time)':<50} {'ms':>9} {'share':>7} {'calls':>7}")
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[: args.top]:
            ms = e.self_cpu_time_total / 1000
            print(f"{e.key[:50]:<50} {ms:>9.1f} {ms / wall:>7.1%} {e.count:>7}")
    slots = real = 0
    width = trainer.width
    for indices in batch_indices(data.train, spec.training.max_tokens, spec.training.seed * 100_003, width):
        batch = collate([data.train[i] for i in indices], width)
        slots += batch.src.numel() + batch.tgt.numel() - batch.tgt.size(0)
        real += batch.src_tokens + batch.tgt_tokens
    print(f"padding: {1 - real / slots:.1%} of the token slots of an epoch's batches (source and target input)")


if __name__ == "__main__":
    main()
