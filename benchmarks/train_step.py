"""A full training step (forward, backward, Adam) of ablate's baseline, in bf16 and fp32, against PyTorch's
nn.Transformer in fp32.

All three have the same size and recipe (Post-LN, ReLU, 1/sqrt(d_k), sinusoidal positions, tied
embeddings, dropout 0.1, label smoothing 0.1) and see the same batches; their steps alternate in one
process so that the machine's noise falls on all of them. bf16 is autocast with fp32 master weights
and an fp32 loss, as `training.precision: bf16` trains (on a CPU without native bf16, with ablate's emulated bf16
matmuls, ablate/train/bf16.py, as a run trains). It prints three ratios of training throughput:

    ablate bf16 / nn.Transformer fp32   goal >= 1.5
    ablate fp32 / nn.Transformer fp32   goal >= 1.0
    ablate bf16 / ablate fp32

    python benchmarks/train_step.py [--d-model 256] [--layers 3] [--d-ff 512] [--tokens 3000] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from ablate.model.spec import ModelSpec
from ablate.model.transformer import build_model
from ablate.parts.positions import sinusoid_table
from ablate.train.bf16 import bf16_matmuls
from ablate.train.device import native_bf16

CPU = torch.device("cpu")
PAD = 0


class PyTorchTransformer(nn.Module):
    """nn.Transformer with the embeddings, positions and tied output projection ablate's baseline has."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_ff: int, layers: int, dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.register_buffer("positions", sinusoid_table(512, d_model))
        self.transformer = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.scale = d_model**0.5

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(x) * self.scale + self.positions[: x.size(1)])

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        hidden = self.transformer(
            self.embed(src), self.embed(tgt), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src == PAD, memory_key_padding_mask=src == PAD,
        )  # fmt: skip
        return hidden @ self.embedding.weight.T


def batches(n: int, batch: int, length: int, vocab: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded batches with lengths spread like sentences'."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(4, vocab, (batch, length), generator=g)
        tgt = torch.randint(4, vocab, (batch, length + 1), generator=g)
        for row in range(batch):
            src[row, torch.randint(length // 2, length + 1, (), generator=g) :] = PAD
            tgt[row, torch.randint(length // 2, length + 2, (), generator=g) :] = PAD
        out.append((src, tgt))
    return out


def step(model: nn.Module, optimizer: torch.optim.Optimizer, src: torch.Tensor, tgt: torch.Tensor, bf16: bool) -> float:
    """One step; bf16's matmuls as a run computes them (ablate.train.bf16: emulated where the CPU has no bf16)."""
    start = time.perf_counter()
    with bf16_matmuls(CPU, "bf16" if bf16 else "fp32"):
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            logits = model(src, tgt[:, :-1])
        logits = logits.float()  # the loss in fp32, as ablate's trainer takes it
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=6000)
    parser.add_argument("--tokens", type=int, default=3000, help="target tokens a batch, padding included")
    parser.add_argument("--length", type=int, default=25)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    spec = ModelSpec(
        d_model=args.d_model, heads=args.heads, d_ff=args.d_ff, encoder_layers=args.layers,
        decoder_layers=args.layers, dropout=0.1, tying="all",
    )  # fmt: skip
    ablate_model = build_model(spec, args.vocab, args.vocab, pad_id=PAD)
    models = {  # name -> (model, bf16); ablate's two arms share one model and optimizer, as a run would
        "ablate bf16": (ablate_model, True),
        "ablate fp32": (ablate_model, False),
        "pytorch fp32": (PyTorchTransformer(args.vocab, args.d_model, args.heads, args.d_ff, args.layers, 0.1), False),
    }
    optimizers = {
        id(m): torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9) for m, _ in models.values()
    }
    data = batches(4, args.tokens // args.length, args.length, args.vocab)
    times: dict[str, list[float]] = {name: [] for name in models}
    order = list(models)
    for i in range(args.steps + 3):  # 3 warm-up steps each, not timed
        for name in order[i % len(order) :] + order[: i % len(order)]:  # rotate who goes first
            model, bf16 = models[name]
            src, tgt = data[i % len(data)]
            elapsed = step(model, optimizers[id(model)], src, tgt, bf16)
            if i >= 3:
                times[name].append(elapsed)

    batch = args.tokens // args.length
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16()}; d_model {args.d_model}, "
        f"{args.layers}+{args.layers} layers, {args.heads} heads, d_ff {args.d_ff}, vocab {args.vocab}, "
        f"batch {batch} x {args.length} target tokens, {args.steps} timed steps each"
    )
    median = {name: statistics.median(t) for name, t in times.items()}
    for name in models:
        print(f"{name:13s} median step {median[name] * 1000:.1f} ms (min {min(times[name]) * 1000:.1f})")
    for a, b, goal in [("ablate bf16", "pytorch fp32", 1.5), ("ablate fp32", "pytorch fp32", 1.0),
                       ("ablate bf16", "ablate fp32", None)]:  # fmt: skip
        ratio = median[b] / median[a]  # throughput: the same tokens a step
        verdict = "" if goal is None else f"  (goal >= {goal}: {'met' if ratio >= goal else 'MISSED'})"
        print(f"throughput {a} / {b}: {ratio:.2f}x{verdict}")


if __name__ == "__main__":
    main()
