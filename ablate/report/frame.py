"""The comparison table: one row a run, with BLEU over seeds, ΔBLEU against the baseline and its interval,
speed and memory, and the notes that say what each figure covers.

Built from ablate.report.results' records, never from the model: torch is not imported.
ablate.report.tables renders it (terminal, md, csv, latex, html).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.errors import UserError, did_you_mean
from ablate.report.results import ExperimentResults, JobRecord, references
from ablate.report.significance import POWER_NOTE, Interval, lacks_spread, no_spread_note, pooled_sd, seeds_for

COLUMNS = ["run", "differs", "params", "BLEU", "BLEU std", "n", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "CI over", "p",
           "seeds for 80%",
           "chrF", "len ratio", "valid loss", "valid ppl", "train tok/s", "tok/s vs baseline", "decode sent/s",
           "GFLOP/tgt tok", "train PFLOP", "TFLOP/s", "MFU", "budget", "peak MiB", "wall s", "device", "GPUs",
           "GPU ids", "cores", "core share", "precision", "status", "note"]  # fmt: skip
HIGHER_IS_BETTER = {"BLEU", "ΔBLEU", "chrF", "train tok/s", "tok/s vs baseline", "decode sent/s", "n"}


@dataclass
class Comparison:
    """How each run's BLEU compares with the baseline's on the test split."""

    p: dict[str, float] = field(default_factory=dict)  # sacreBLEU's paired test, seed-matched hypotheses
    intervals: dict[str, Interval] = field(default_factory=dict)  # ΔBLEU, seeds and sentences (significance.py)
    length_ratio: dict[str, float] = field(default_factory=dict)  # hypothesis over reference length, seeds' mean
    notes: list[str] = field(default_factory=list)


def compare(exp: ExperimentResults, split: str, test: str, p_values: bool = True) -> Comparison:
    """Each run's length ratio, and its ΔBLEU interval and p-value against its reference (none with test "none";
    no p-value without `p_values`).

    All of them need the test references; when they cannot be read, a note says so.
    """
    from ablate.report.significance import bleu_scorer, bleu_statistics, delta_interval, length_ratio, paired_test

    out = Comparison()

    def scored(jobs: list[JobRecord]) -> list[JobRecord]:
        return [j for j in jobs if j.ok and j.hypotheses(split) is not None]

    first = next((j for jobs in exp.runs.values() for j in scored(jobs)), None)
    if first is None:
        return out
    try:
        refs = references(first.config, split)
    except UserError as error:
        out.notes.append(f"{'len ratio' if test == 'none' else 'len ratio, ΔBLEU intervals and p'} not computed, "
                         f"the test references are not readable: {error.lines[0].split(': ')[0]}: missing (point "
                         "ABLATE_DATA_DIR at the corpora, or run: ablate data download multi30k)")  # fmt: skip
        return out
    lowercase = bool(first.config.get("evaluation", {}).get("lowercase", False))
    score = bleu_scorer(lowercase)
    statistics_of: dict[Path, Any] = {}

    def stats(jobs: list[JobRecord]):
        import numpy as np

        for j in jobs:
            if j.directory not in statistics_of:
                statistics_of[j.directory] = bleu_statistics(j.hypotheses(split), refs, lowercase)
        return np.stack([statistics_of[j.directory] for j in jobs])  # (seeds, N, K)

    for run, jobs in exp.runs.items():
        if done := scored(jobs):
            out.length_ratio[run] = round(float(length_ratio(stats(done)).mean()), 3)
    if test == "none":
        return out
    tests: dict[tuple, tuple[list[str], dict[str, list[str]]]] = {}  # (reference, seeds) -> its hypotheses, runs'
    for run, jobs in exp.runs.items():
        reference = exp.reference(run)
        done, base = scored(jobs), scored(exp.runs.get(reference, []))
        if run == reference or not done or not base:
            continue
        out.intervals[run] = delta_interval(stats(base), stats(done), score)
        by_seed = {j.result["seed"]: j for j in base}
        paired = [j for j in done if j.result["seed"] in by_seed]
        if paired:
            key = (reference, *(j.result["seed"] for j in paired))
            group = tests.setdefault(
                key, ([h for j in paired for h in by_seed[j.result["seed"]].hypotheses(split)], {})
            )
            group[1][run] = [h for j in paired for h in j.hypotheses(split)]
    for key, (base_lines, systems) in tests.items() if p_values else ():  # one per reference and set of seeds
        out.p |= paired_test(base_lines, systems, refs * (len(key) - 1), lowercase, test)
    return out


def mean_of(values: list[float], digits: int = 2) -> float | None:
    return round(statistics.fmean(values), digits) if values else None


def report_frame(exp: ExperimentResults, test: str = "bs") -> tuple[pd.DataFrame, list[str]]:
    """One row a run (numbers for csv), and notes to print under the table."""
    split = exp.split()
    comparison = compare(exp, split, test) if split else Comparison()
    notes = list(comparison.notes)

    def bleu_of(jobs: list[JobRecord]) -> list[float]:
        return [j.result["scores"][split]["bleu"] for j in jobs if j.ok and split in j.result.get("scores", {})]

    def speed(jobs: list[JobRecord]) -> float | None:
        rates = [j.result["train_src_tokens_per_s"] + j.result["train_tgt_tokens_per_s"] for j in jobs
                 if "train_src_tokens_per_s" in j.result]  # fmt: skip
        return mean_of(rates, 0)

    rows, no_spread = [], []
    for run, jobs in exp.runs.items():
        reference = exp.runs.get(exp.reference(run), [])
        base_bleu, base_speed = mean_of(bleu_of(reference)), speed(reference)
        ok = [j for j in jobs if j.ok]
        bleu = bleu_of(jobs)
        mean = mean_of(bleu)
        rate = speed(jobs)
        decode = [j.result["decode_sentences_per_s"] for j in ok if "decode_sentences_per_s" in j.result]
        interval, spread = comparison.intervals.get(run), pooled_sd(bleu, bleu_of(reference))
        if lacks_spread(interval, spread):
            no_spread.append(run)
        rows.append({
            "run": run, "differs": jobs[0].result.get("describe", "-"), "params": jobs[0].result.get("params"),
            "BLEU": mean, "BLEU std": round(statistics.stdev(bleu), 2) if len(bleu) > 1 else None, "n": len(bleu),
            "ΔBLEU": None if mean is None or base_bleu is None or run == exp.reference(run)
            else round(mean - base_bleu, 2),
            "ΔBLEU lo": _rounded(comparison.intervals.get(run), "low"),
            "ΔBLEU hi": _rounded(comparison.intervals.get(run), "high"),
            "CI over": _covers(comparison.intervals.get(run)), "p": comparison.p.get(run),
            "seeds for 80%": seeds_for(interval, spread),
            "chrF": mean_of([j.result["scores"][split]["chrf"] for j in ok if split in j.result.get("scores", {})]),
            "len ratio": comparison.length_ratio.get(run),
            "valid loss": mean_of([j.result["valid_loss"] for j in ok if "valid_loss" in j.result], 3),
            "valid ppl": mean_of([j.result["valid_ppl"] for j in ok if "valid_ppl" in j.result]),
            "train tok/s": rate, "tok/s vs baseline": round(rate / base_speed, 2) if rate and base_speed else None,
            "decode sent/s": mean_of(decode, 1),
            "GFLOP/tgt tok": significant_mean([j.result.get("gflop_per_target_token") for j in jobs]),
            "train PFLOP": significant_mean([j.result["train_flops"] / 1e15 for j in jobs
                                             if "train_flops" in j.result]),
            "TFLOP/s": significant_mean([j.result.get("train_tflops_per_s") for j in jobs]),
            "MFU": significant_mean([j.result.get("mfu") for j in jobs]),
            "budget": ", ".join(dict.fromkeys(_budget(j.result["budget"]) for j in jobs if j.result.get("budget")))
            or None,
            "peak MiB": mean_of([j.result["peak_memory_mib"] for j in jobs if "peak_memory_mib" in j.result], 1),
            "wall s": mean_of([j.result["wall_seconds"] for j in jobs if "wall_seconds" in j.result], 1),
            "device": ", ".join(dict.fromkeys(j.result["device"] for j in jobs if "device" in j.result)) or None,
            "GPUs": max((j.result.get("gpus", 0) for j in jobs), default=0),
            "GPU ids": " / ".join(",".join(map(str, j.result["gpu_ids"])) for j in jobs if j.result.get("gpu_ids"))
            or None,
            "cores": " / ".join(_cores(j.result["cpu_ids"]) for j in jobs if j.result.get("cpu_ids")) or None,
            "core share": min((j.result["core_share"] for j in jobs if j.result.get("core_share") is not None),
                              default=None),
            "precision": ", ".join(dict.fromkeys(j.result["precision"] for j in jobs if "precision" in j.result))
            or None,
            "status": _status([j.result.get("status", "?") for j in jobs]),
            "note": "; ".join(dict.fromkeys(j.result["note"] for j in jobs if j.result.get("note"))) or None,
        })  # fmt: skip
    if split:
        notes.insert(0, f"BLEU and chrF on {split}: {_signature(exp, split)}")
    notes += explanations(comparison, test)
    if any(row["seeds for 80%"] is not None for row in rows):
        notes.append(POWER_NOTE)
    if no_spread:
        notes.append(no_spread_note(no_spread))
    devices = {j.result["device"]: None for jobs in exp.runs.values() for j in jobs if "device" in j.result}
    if len(devices) > 1:
        notes.append(f"The runs trained on {len(devices)} different devices ({'; '.join(devices)}): train tok/s, "
                     "tok/s vs baseline, decode sent/s, TFLOP/s, MFU and wall s compare those as well as the "
                     "models.")  # fmt: skip
    busy = [row["run"] for row in rows if row["core share"] is not None and row["core share"] < BUSY]
    if busy:
        notes.append(
            f"† {', '.join(busy)}: other processes ran on the run's cores (core share below {BUSY:.0%}, the "
            "lowest over its seeds), so its train tok/s, tok/s vs baseline, decode sent/s, TFLOP/s, MFU "
            "and wall s measure a busy machine, not the run; compare speeds only between rows without †."
        )
    frame = pd.DataFrame(rows, columns=COLUMNS, dtype=object)
    for optional in ("note", "GPU ids", "cores", "core share", "GFLOP/tgt tok", "train PFLOP", "TFLOP/s", "MFU",
                     "budget", "seeds for 80%"):  # fmt: skip
        # a re-run after a spec change, GPUs handed out, results from before FLOPs were counted: else no column
        if frame[optional].isna().all():
            frame = frame.drop(columns=optional)
    if not comparison.length_ratio:
        frame = frame.drop(columns="len ratio")
    if not comparison.intervals:
        frame = frame.drop(columns=["ΔBLEU lo", "ΔBLEU hi", "CI over"])
    if test == "none":
        frame = frame.drop(columns="p")
    return frame, notes


BUSY = 0.9  # a run whose cores gave it less than this share of their time did not have them to itself
SPEED = ("train tok/s", "tok/s vs baseline", "decode sent/s", "TFLOP/s", "MFU", "wall s")  # what a busy machine skews


def _cores(ids: list[int]) -> str:
    """Core ids as ranges: [0, 1, 2, 5] -> `0-2,5`."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def significant_mean(values: list[float | None], digits: int = 3) -> float | None:
    """The mean to `digits` significant figures: FLOP figures span many orders of magnitude."""
    present = [v for v in values if v is not None]
    return float(f"{statistics.fmean(present):.{digits}g}") if present else None


BUDGET_UNITS = {"max_steps": "steps", "max_epochs": "epochs", "max_target_tokens": "tgt tokens",
                "max_flops": "FLOPs", "max_seconds": "s"}  # fmt: skip


def _budget(budget: dict[str, float]) -> str:
    """`1450 steps`, `2e+15 FLOPs`: what the run's length was set in (the first reached ends it)."""
    return " or ".join(f"{value:g} {BUDGET_UNITS.get(name, name)}" for name, value in budget.items())


def _rounded(interval: Interval | None, end: str) -> float | None:
    return None if interval is None else round(getattr(interval, end), 2)


def _covers(interval: Interval | None) -> str | None:
    if interval is None:
        return None
    return "seeds, sentences" if interval.seeds else "sentences"


def explanations(comparison: Comparison, test: str) -> list[str]:
    """What the interval and the p-value mean, and what they leave out, in words a reviewer accepts."""
    notes = []
    if comparison.intervals:
        notes.append("ΔBLEU [lo, hi]: the run's mean BLEU over its seeds minus the baseline's, with a 95% confidence "
                     "interval that counts both seed-to-seed variance (Student's t over each arm's seeds) and "
                     "test-set sampling (paired bootstrap over sentences, 1,000 resamples); * marks an interval "
                     "that excludes 0. It does not cover other corpora, other learning rates or longer "
                     "training.")  # fmt: skip
        if not all(i.seeds for i in comparison.intervals.values()):
            notes.append("CI over 'sentences': an arm has a single seed, so seed-to-seed variance is not covered "
                         "and the interval is too narrow for a claim about the architecture; train more seeds "
                         "(ablate run --seeds 3).")  # fmt: skip
    if comparison.length_ratio:
        notes.append("len ratio: the length of the hypotheses over that of the references, in BLEU's tokens "
                     "(sacreBLEU's ratio), mean over seeds; below 1 BLEU's brevity penalty multiplies the score by "
                     "exp(1 - 1/ratio), 0.90 by 0.89.")  # fmt: skip
    if comparison.p:
        notes.append(f"p: sacreBLEU's paired {'bootstrap resampling' if test == 'bs' else 'approximate randomisation'}"
                     " against the baseline, seed-matched hypotheses concatenated: the chance of a difference this "
                     "large from test-set sampling alone; seed variance is not in it.")  # fmt: skip
    return notes


def _status(statuses: list[str]) -> str:
    """`completed`, or `2 completed, 1 diverged` when the seeds of a run ended differently."""
    if len(set(statuses)) == 1:
        return str(statuses[0])
    return ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))


def _signature(exp: ExperimentResults, split: str) -> str:
    for jobs in exp.runs.values():
        for j in jobs:
            if j.ok and split in j.result.get("scores", {}):
                return j.result["scores"][split].get("bleu_signature", "?")
    return "?"


def select(frame: pd.DataFrame, columns: list[str] | None, sort: str | None, reverse: bool,
           optional: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """Chosen columns (run first), sorted on one; scores sort best first. `optional`'s columns join when named."""
    named = [*(columns or []), *([sort] if sort else [])]
    extra = [c for c in (optional.columns if optional is not None else []) if c != "run" and c not in frame.columns]
    for name in named:
        if name not in frame.columns and name not in extra:
            known = [*frame.columns, *extra]
            raise UserError(f"--columns/--sort: no column '{name}'{did_you_mean(name, known)} "
                            f"(columns: {', '.join(known)})")  # fmt: skip
    for name in dict.fromkeys(c for c in named if c in extra):
        values = dict(zip(optional["run"], optional[name], strict=True))
        frame = frame.assign(**{name: pd.Series([values.get(r) for r in frame["run"]], frame.index, dtype=object)})
    if sort:
        descending = (sort in HIGHER_IS_BETTER or (sort.startswith("BLEU ") and sort != "BLEU std")) != reverse
        records = frame.to_dict("records")
        present = sorted((r for r in records if r[sort] is not None), key=lambda r: r[sort], reverse=descending)
        missing = [r for r in records if r[sort] is None]  # diverged, failed: last either way
        frame = pd.DataFrame(present + missing, columns=frame.columns, dtype=object)
    if columns:
        frame = frame[list(dict.fromkeys(["run", *columns]))]
    return frame
