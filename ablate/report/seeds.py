"""Every seed's scores on every test split, and each run's mean, spread and 95% interval over its seeds: the table a
reproduction prints beside a published number (report/seeds.md, seeds.csv).

A job decoded again (its spec's decoding alone changed: docs/running.md) keeps its earlier result beside it as
seed-<n>.stale-<hash>. Those scores are rows of their own here, labelled by their decoding, so that one table gives
the same trained weights scored each way. Torch-free, like the rest of the report.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pandas as pd

from ablate.record import RunResult
from ablate.report.results import ExperimentResults
from ablate.report.significance import t_ppf
from ablate.rundir import as_stored, earlier_decodings, read_result

SCORES = {"bleu": "BLEU", "cased_bleu": "cased BLEU", "chrf": "chrF"}  # Score's fields, as the table names them
SET_ASIDE = " (set aside)"


def seeds_frame(exp: ExperimentResults) -> tuple[pd.DataFrame, list[str]] | None:
    """One row a run, decoding, test split and score: each seed's value, their mean, standard deviation and the
    mean's 95% t interval (n − 1 degrees of freedom); None when no job has a score."""
    decoded: dict[tuple[str, str], dict[int, RunResult]] = {}  # (run, decoding) -> seed -> its result
    signatures: dict[str, str] = {}
    for run, jobs in exp.runs.items():
        done = [j for j in jobs if j.ok and j.result.scores]
        earlier = {j.result.seed: earlier_decodings(j.directory) for j in done}
        keys = sorted({key for found in earlier.values() for _, values in found for key in values})
        for job in done:
            stored = as_stored(job.config)
            now = {key: (stored.get(key.split(".")[0]) or {}).get(key.split(".")[1]) for key in keys}
            decoded.setdefault((run, _decoding(now)), {})[job.result.seed] = job.result
            for stale, values in earlier[job.result.seed]:
                result = read_result(stale)
                if result is not None and result.ok and result.scores:
                    label = _decoding({key: values.get(key, now[key]) for key in keys}) + SET_ASIDE
                    decoded.setdefault((run, label), {})[result.seed] = result
        for result in (j.result for j in done):
            signatures |= {split: score.bleu_signature for split, score in result.scores.items()}
    if not decoded:
        return None
    seeds = sorted({seed for results in decoded.values() for seed in results})
    rows = []
    for (run, decoding), results in decoded.items():
        splits = list(dict.fromkeys(split for r in results.values() for split in r.scores))
        for split in splits:
            for field, score in SCORES.items():
                values = {seed: getattr(r.scores[split], field) for seed, r in results.items() if split in r.scores}
                values = {seed: value for seed, value in values.items() if value is not None}
                if values:
                    row = {"run": run, "decoding": decoding, "split": split, "score": score}
                    rows.append(row | {f"seed {s}": values.get(s) for s in seeds} | summary(list(values.values())))
    frame = pd.DataFrame(rows)
    if not any(decoding for _, decoding in decoded):
        frame = frame.drop(columns="decoding")
    notes = ["mean ± sd over the seeds that scored the split, [the mean's 95% interval, t with n − 1 degrees of "
             "freedom]; cased BLEU where the runs score lowercased text (evaluation.lowercase)"]  # fmt: skip
    notes += [f"BLEU on {split}: {signature}" for split, signature in signatures.items()]
    if "decoding" in frame.columns:
        notes.append("decoding: the keys in which a run's decodings differ; (set aside): an earlier result of the "
                     "same training, kept as seed-<n>.stale-<hash> when only its decoding changed")  # fmt: skip
    return frame, notes


def summary(values: list[float]) -> dict[str, Any]:
    """n, the mean and standard deviation (rounded to 0.01), and the mean's 95% t interval where n > 1."""
    n, mean = len(values), statistics.fmean(values)
    if n < 2:
        return {"n": n, "mean": round(mean, 2), "sd": None, "95% lo": None, "95% hi": None}
    sd = statistics.stdev(values)
    half = float(t_ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": round(mean, 2), "sd": round(sd, 2), "95% lo": round(mean - half, 2),
            "95% hi": round(mean + half, 2)}  # fmt: skip


def _decoding(values: dict[str, Any]) -> str:
    """Keys and their values, "length_penalty 0.6; length_penalty_form gnmt" ("evaluation." left out)."""
    return "; ".join(f"{key.split('.', 1)[1]} {', '.join(map(str, v)) if isinstance(v, list) else v}"
                     for key, v in values.items())  # fmt: skip
