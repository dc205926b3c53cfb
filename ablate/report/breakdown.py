"""What explains a row, from result files: BLEU by source length, and the diagnostics as table columns.

`length_frame` is the report's length table (length.md); `optional_frame` holds the columns that
`ablate report --columns` may add to the comparison table: the gradient norm at initialisation, the
attention entropy, largest logit and logits norm at the end (ablate.model.diagnostics), and `BLEU <bucket>`.
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

from ablate.record import BucketScore
from ablate.report.frame import mean_of, significant_mean
from ablate.report.results import ExperimentResults, JobRecord, bleus

# Shown only when --columns or --sort names them, with `BLEU <bucket>` for each source-length bucket (`BLEU 31+`)
OPTIONAL = ["grad norm init", "entropy end", "max logit end", "logits norm end"]


def by_length(jobs: list[JobRecord], split: str | None) -> dict[str, list[float]]:
    """Source-length bucket (`1-10`, `31+`) -> the BLEU of each completed seed there, buckets in result.json's order."""
    out: dict[str, list[float]] = {}
    for job in jobs:
        score = job.result.scores.get(split) if job.ok else None
        if score is None or score.by_length is None:
            continue
        for bucket, in_bucket in score.by_length.items():
            scores = out.setdefault(bucket, [])
            if in_bucket.bleu is not None:  # an empty bucket has no score
                scores.append(in_bucket.bleu)
    return out


def bucket_sizes(exp: ExperimentResults, split: str | None) -> dict[str, BucketScore]:
    """Source-length bucket -> its scores in the first completed job that has buckets (their `sentences`)."""
    for jobs in exp.runs.values():
        for job in jobs:
            score = job.result.scores.get(split) if job.ok else None
            if score is not None and score.by_length is not None:
                return score.by_length
    return {}


def length_frame(exp: ExperimentResults) -> tuple[pd.DataFrame, list[str]] | None:
    """BLEU by source-length bucket, one row a run (mean over completed seeds); None when no run has buckets."""
    split = exp.split()
    buckets = {run: by_length(jobs, split) for run, jobs in exp.runs.items()}
    labels = list(dict.fromkeys(label for scores in buckets.values() for label in scores))
    if not labels:
        return None
    rows = []
    for run, jobs in exp.runs.items():
        bleu = bleus(jobs, split)
        rows.append({"run": run, "n": len(bleu), "BLEU": mean_of(bleu)}
                    | {f"BLEU {label}": mean_of(buckets[run].get(label, [])) for label in labels})  # fmt: skip
    counts = ", ".join(f"{label} {score.sentences}" for label, score in bucket_sizes(exp, split).items())
    notes = [
        f"BLEU on {split} by source length in words (compare-mt's buckets), mean over the completed seeds; "
        f"each bucket's BLEU is over its sentences alone, so a small bucket's is noisy. Sentences: {counts}."
    ]
    return pd.DataFrame(rows, columns=["run", "n", "BLEU", *(f"BLEU {b}" for b in labels)], dtype=object), notes


def optional_frame(exp: ExperimentResults) -> pd.DataFrame:
    """The columns --columns may add, one row a run: diagnostics at initialisation and at the end, BLEU by length.

    The gradient norm at initialisation is measured before the first update, so every seed counts; the
    values at the end count completed seeds only, as BLEU does.
    """
    split = exp.split()
    rows = []
    for run, jobs in exp.runs.items():
        records = [(j, j.diagnostics()) for j in jobs]
        first = [r[0] for _, r in records if r]
        last = [r[-1] for j, r in records if r and j.ok]
        rows.append({
            "run": run,
            "grad norm init": significant_mean([math.sqrt(sum(v**2 for v in r["grad_norm"].values())) for r in first
                                            if r.get("grad_norm")]),
            "entropy end": mean_of([statistics.fmean(h for heads in r["attention_entropy"].values() for h in heads)
                                  for r in last if r.get("attention_entropy")], 3),
            "max logit end": mean_of([max(r["max_logit"].values()) for r in last if r.get("max_logit")]),
            "logits norm end": mean_of([r["logits_norm"] for r in last if "logits_norm" in r]),
            **{f"BLEU {label}": mean_of(scores) for label, scores in by_length(jobs, split).items()},
        })  # fmt: skip
    columns = list(dict.fromkeys(c for row in rows for c in row)) or ["run", *OPTIONAL]
    return pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=columns, dtype=object)
