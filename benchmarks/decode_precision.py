"""Beam search of one trained checkpoint in fp32 and in bf16 autocast: the same test set, BLEU and speed side by side.

It decides whether decoding may run in bf16 too: only where BLEU stays within noise of fp32 decoding
of the same weights. The weights are a finished run's (its last checkpoint, or the mean of the
checkpoints it kept when it averaged them), decoded as the run decoded its test split.

    python benchmarks/decode_precision.py results/tuning-base-cpu/runs/baseline/seed-1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from ablate.data.dataset import load_dataset
from ablate.data.tokenizer import PAD
from ablate.errors import UserError
from ablate.model.transformer import build_model
from ablate.rundir import read_result
from ablate.train import checkpoints
from ablate.train.bf16 import bf16_matmuls
from ablate.train.device import native_bf16
from ablate.train.evaluation import score, translate
from ablate.train.job import Job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a completed job's directory (runs/<run>/seed-<n>)")
    parser.add_argument("--last", action="store_true", help="the last checkpoint's weights, even if the run averaged")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated, of fp32 and bf16")
    args = parser.parse_args()

    job = Job.load(args.run_dir)
    spec = job.run_spec()
    data = load_dataset(spec.data, spec.tokenizer)
    model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD).eval()
    result = read_result(args.run_dir)
    averaged = result.averaged_steps if result is not None else None
    try:
        model.load_state_dict(checkpoints.scored_weights(args.run_dir, None if args.last else averaged,
                                                         job.config_hash))  # fmt: skip
    except UserError as error:
        raise SystemExit(str(error)) from None
    ev = spec.evaluation
    split, pairs = next(iter(data.tests.items()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, native bf16: {native_bf16()}; "
          f"{args.run_dir} ({'last checkpoint' if args.last or not averaged else f'mean of steps {averaged}'}), "
          f"{split} ({len(pairs)} sentences), beam {ev.beam_size}")  # fmt: skip
    bleu = {}
    amps = {"fp32": None, "bf16": torch.autocast("cpu", dtype=torch.bfloat16)}
    for name in args.precisions.split(","):
        amp = amps[name]
        start = time.perf_counter()
        with bf16_matmuls(torch.device("cpu"), name):  # as a run decodes: emulated where bf16 is not native
            out = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab, beam_size=ev.beam_size,
                            alpha=ev.length_penalty, max_extra_len=ev.max_extra_len, batch_size=ev.batch_size,
                            device=torch.device("cpu"), autocast=amp, form=ev.length_penalty_form)  # fmt: skip
        seconds = time.perf_counter() - start
        s = score(out.hypotheses, [p[1] for p in pairs], ev.lowercase)
        bleu[name] = s.bleu
        print(f"{name}: BLEU {s.bleu:.2f}  chrF {s.chrf:.2f}  {len(pairs) / seconds:.1f} sentences/s")
    if len(bleu) == 2:
        print(f"BLEU bf16 - fp32: {bleu['bf16'] - bleu['fp32']:+.2f}")


if __name__ == "__main__":
    main()
