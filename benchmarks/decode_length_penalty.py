"""Finished runs decoded again with other length penalties: BLEU of each form side by side, with no retraining.

Each run's scored weights (the mean of the checkpoints it averaged, or its last) are decoded as the run decoded
them (its beam, max length and precision) on its validation split and every test split, once for each penalty
`FORM:ALPHA` (ablate.model.decoding.FORMS): GNMT's ((5 + |Y|) / 6)^alpha, the paper's and ablate's default, and
fairseq's |Y|^alpha (its `--lenpen`, 1 by default), which papers decoded with fairseq used. The run's own penalty
is decoded too: its test hypotheses must be the ones the run wrote, which the last column checks. `--average N`
looks at a run still training: the mean of its last N kept checkpoints.

A penalty is part of a recipe, taken from the paper it reproduces. Choose one on the validation split, never by
these test scores: this prints them to report what a recipe's decoding does, not to pick it.

    python benchmarks/decode_length_penalty.py results/transformer-tiny/runs/baseline/seed-* \
        --penalties gnmt:0.6,fairseq:1
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from ablate.data.dataset import load_dataset
from ablate.data.tokenizer import PAD
from ablate.errors import UserError
from ablate.model.decoding import FORMS
from ablate.model.transformer import build_model
from ablate.rundir import hypotheses_path, read_result
from ablate.train import checkpoints
from ablate.train.bf16 import bf16_matmuls
from ablate.train.evaluation import score, translate
from ablate.train.job import Job
from ablate.train.trainer import autocast


def penalties(text: str) -> list[tuple[str, float]]:
    out = []
    for item in text.split(","):
        form, _, alpha = item.partition(":")
        if form not in FORMS or not alpha:
            raise SystemExit(f"--penalties: {item!r} is not FORM:ALPHA with FORM one of {', '.join(FORMS)}")
        out.append((form, float(alpha)))
    return out


def length_ratio(hypotheses: list[str], references: list[str], lowercase: bool) -> float:
    """sacreBLEU's hypothesis length over reference length (13a tokens): under 1, the brevity penalty bites."""
    stats = BLEU(lowercase=lowercase).corpus_score(hypotheses, [references])
    return stats.sys_len / stats.ref_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", help="finished jobs' directories (runs/<run>/seed-<n>)")
    parser.add_argument("--penalties", type=penalties, default=penalties("gnmt:0.6,fairseq:1"),
                        help="comma-separated FORM:ALPHA (default gnmt:0.6,fairseq:1)")  # fmt: skip
    parser.add_argument("--average", type=int, metavar="N",
                        help="the mean of the last N checkpoints kept, instead of the weights the run scored: a look "
                        "at a run still training")  # fmt: skip
    parser.add_argument("--splits", help="comma-separated splits to decode (default: validation and every test split)")
    args = parser.parse_args()

    rows = []  # (run, split, penalty, BLEU, cased BLEU, chrF, length ratio, same as result.json)
    for run_dir in args.run_dirs:
        job, result = Job.load(run_dir), read_result(run_dir)
        if args.average is None and (result is None or not result.ok):
            raise SystemExit(f"{run_dir}: no completed result.json (--average N looks at a run still training)")
        spec = job.run_spec()
        ev = spec.evaluation
        data = load_dataset(spec.data, spec.tokenizer)
        model = build_model(spec.model, len(data.src_vocab), len(data.tgt_vocab), pad_id=PAD).eval()
        steps = checkpoints.kept_steps(run_dir)[-args.average :] if args.average else result.averaged_steps
        try:
            model.load_state_dict(checkpoints.scored_weights(run_dir, steps, job.config_hash))
        except UserError as error:
            raise SystemExit(str(error)) from None
        precision = (result.precision if result is not None else None) or spec.training.precision
        if precision not in ("fp32", "bf16"):
            raise SystemExit(f"{run_dir}: training.precision is {precision!r}; decode a finished run")
        device = torch.device("cpu")
        splits = {spec.data.valid: data.valid_pairs, **data.tests}
        if args.splits:
            unknown = set(args.splits.split(",")) - set(splits)
            if unknown:
                raise SystemExit(f"--splits: {', '.join(sorted(unknown))}: not a split of {run_dir} "
                                 f"({', '.join(splits)})")  # fmt: skip
            splits = {name: pairs for name, pairs in splits.items() if name in args.splits.split(",")}
        own = (ev.length_penalty_form, ev.length_penalty)
        print(f"{run_dir}: {'mean of steps ' + str(steps) if steps else 'last'}, beam {ev.beam_size}, {precision}, "
              f"{torch.get_num_threads()} threads", flush=True)  # fmt: skip
        for form, alpha in sorted(set(args.penalties) | {own}, key=lambda p: p != own):
            for split, pairs in splits.items():
                with bf16_matmuls(device, precision):
                    out = translate(model, [p[0] for p in pairs], data.src_vocab, data.tgt_vocab,
                                    beam_size=ev.beam_size, alpha=alpha, max_extra_len=ev.max_extra_len,
                                    batch_size=ev.batch_size, device=device, autocast=autocast(device, precision),
                                    form=form)  # fmt: skip
                refs = [p[1] for p in pairs]
                scored, cased = score(out.hypotheses, refs, ev.lowercase), score(out.hypotheses, refs)
                same = same_as_run(run_dir, split, out.hypotheses) if (form, alpha) == own and not args.average else ""
                rows.append((run_dir, split, f"{form}:{alpha:g}", scored.bleu, cased.bleu, scored.chrf,
                             length_ratio(out.hypotheses, refs, ev.lowercase), same))  # fmt: skip
                print(f"  {split} {form}:{alpha:g}: BLEU {scored.bleu:.2f} (cased {cased.bleu:.2f}) "
                      f"{len(pairs) / out.seconds:.1f} sentences/s", flush=True)  # fmt: skip

    flavour = "lowercase BLEU" if rows and spec.evaluation.lowercase else "BLEU"
    print(f"\n| run | split | penalty | {flavour} | cased BLEU | chrF | length ratio | the run's own hypotheses |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for run_dir, split, penalty, bleu, cased, chrf, ratio, same in rows:
        print(f"| {run_dir} | {split} | {penalty} | {bleu:.2f} | {cased:.2f} | {chrf:.2f} | {ratio:.3f} | {same} |")
    print(f"\n| split | penalty | runs | {flavour}, mean ± sd | cased BLEU, mean ± sd |")
    print("|---|---|---:|---:|---:|")
    for split in dict.fromkeys(r[1] for r in rows):
        for penalty in dict.fromkeys(r[2] for r in rows):
            bleus = [r[3] for r in rows if r[1] == split and r[2] == penalty]
            cased = [r[4] for r in rows if r[1] == split and r[2] == penalty]
            print(f"| {split} | {penalty} | {len(bleus)} | {mean_sd(bleus)} | {mean_sd(cased)} |")


def same_as_run(run_dir: Path, split: str, hypotheses: list[str]) -> str:
    """Whether these are the hypotheses the run wrote for `split` (none for the validation split)."""
    path = hypotheses_path(run_dir, split)
    if not path.is_file():
        return ""
    written = path.read_text(encoding="utf-8").splitlines()
    differ = sum(a != b for a, b in zip(written, hypotheses, strict=False)) + abs(len(written) - len(hypotheses))
    return "yes, every sentence" if not differ else f"no: {differ} of {len(written)} sentences differ"


def mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "-"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


if __name__ == "__main__":
    main()
