"""Greedy decoding of the test set with the incremental cache against full recomputation, side by side.

The model is experiments/base.yaml's architecture. Untrained, it rarely emits </s>, so every sentence
is decoded to exactly its source length (max_extra_len 0): the lengths a trained model produces on
Multi30k, where translations are about as long as their sources. Target: cache >= 3x faster at batch 100.

    python benchmarks/decode.py [--experiment experiments/base.yaml] [--batch 100] [--sentences 1000]
"""

from __future__ import annotations

import argparse
import time

import torch

import ablate
from ablate.data.batches import pad
from ablate.data.dataset import load_dataset
from ablate.data.tokenizer import EOS, PAD
from ablate.model.decoding import greedy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/base.yaml")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    spec = ablate.load_experiment(args.experiment).baseline.spec
    data = load_dataset(spec.data, spec.tokenizer)
    split = spec.data.test[0]
    sources = [p[0] for p in data.tests[split][: args.sentences]]
    ids = sorted(([*s, EOS] for s in data.src_vocab.encode(sources)), key=len)
    batches = [pad(ids[i : i + args.batch]) for i in range(0, len(ids), args.batch)]
    torch.manual_seed(0)
    model = ablate.build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD).eval()

    times: dict[str, list[float]] = {"cache": [], "full": []}
    outputs: dict[str, list] = {}
    for _ in range(args.repeats):
        for name, use_cache in [("cache", True), ("full", False)]:
            start = time.perf_counter()
            outputs[name] = [greedy(model, b, max_extra_len=0, use_cache=use_cache) for b in batches]
            times[name].append(time.perf_counter() - start)
    assert outputs["cache"] == outputs["full"], "cached decoding differs from full recomputation"

    tokens = sum(len(h) for out in outputs["cache"] for h in out)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.experiment} architecture, "
        f"{len(ids)} sentences of {split}, batch {args.batch}, {tokens} output tokens, best of {args.repeats}"
    )
    for name in times:
        best = min(times[name])
        print(f"{name:5s}  {best:7.2f} s  {len(ids) / best:8.1f} sentences/s")
    ratio = min(times["full"]) / min(times["cache"])
    verdict = "met" if ratio >= 3 else "MISSED"
    print(f"speed-up of the cache over full recomputation: {ratio:.2f}x  (target >= 3x: {verdict}); outputs identical")


if __name__ == "__main__":
    main()
