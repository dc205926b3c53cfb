"""The comparison table of an experiment, from result records alone (no torch, no model).

One row a run: scores are the mean over its completed seeds, with their standard deviation and n.
A seed that diverged or failed adds no number; the status column says what happened to it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.results import write_text

COLUMNS = ["run", "differs", "params", "BLEU", "BLEU std", "n", "chrF", "valid loss", "train tok/s (src/tgt)",
           "step ms", "decode sent/s", "peak MiB", "wall s", "device", "GPUs", "precision", "status",
           "note"]  # fmt: skip


def _mean(values: list[float], digits: int = 2) -> float | None:
    return round(statistics.fmean(values), digits) if values else None


def _std(values: list[float]) -> float | None:
    return round(statistics.stdev(values), 2) if len(values) > 1 else None


def summary_frame(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row a run, in the order the runs first appear in `results` (one record a seed)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        runs.setdefault(r["run"], []).append(r)
    rows = []
    for name, seeds in runs.items():
        ok = [r for r in seeds if r.get("status") == "completed"]
        first = seeds[0]
        row: dict[str, Any] = {"run": name, "differs": first.get("describe", "-"), "params": first.get("params")}
        splits = list(dict.fromkeys(s for r in ok for s in r.get("scores", {})))
        for split in splits or [None]:
            suffix = "" if len(splits) <= 1 else f" {split}"
            bleu = [r["scores"][split]["bleu"] for r in ok if split in r.get("scores", {})]
            chrf = [r["scores"][split]["chrf"] for r in ok if split in r.get("scores", {})]
            row[f"BLEU{suffix}"], row[f"BLEU std{suffix}"] = _mean(bleu), _std(bleu)
            row[f"chrF{suffix}"] = _mean(chrf)
        row["n"] = len(ok)
        row["valid loss"] = _mean([r["valid_loss"] for r in ok if "valid_loss" in r], 3)
        src = _mean([r["train_src_tokens_per_s"] for r in seeds if "train_src_tokens_per_s" in r], 0)
        tgt = _mean([r["train_tgt_tokens_per_s"] for r in seeds if "train_tgt_tokens_per_s" in r], 0)
        row["train tok/s (src/tgt)"] = f"{src:,.0f} / {tgt:,.0f}" if src is not None else None
        for column, key in (("step ms", "step_ms"), ("peak MiB", "peak_memory_mib"), ("wall s", "wall_seconds")):
            row[column] = _mean([r[key] for r in seeds if key in r], 1)
        row["decode sent/s"] = _mean([r["decode_sentences_per_s"] for r in ok if "decode_sentences_per_s" in r], 1)
        row["device"] = ", ".join(dict.fromkeys(r["device"] for r in seeds if "device" in r)) or None
        row["GPUs"] = max((r.get("gpus", 0) for r in seeds), default=0)
        row["precision"] = ", ".join(dict.fromkeys(r["precision"] for r in seeds if "precision" in r)) or None
        counts = Counter(r.get("status", "?") for r in seeds)
        row["status"] = next(iter(counts)) if len(counts) == 1 else ", ".join(f"{n} {s}" for s, n in counts.items())
        row["note"] = "; ".join(dict.fromkeys(r["note"] for r in seeds if r.get("note"))) or None
        rows.append(row)
    frame = pd.DataFrame(rows, dtype=object)  # ints stay ints, missing stays None
    ordered = [c for c in COLUMNS if c in frame]
    at = ordered.index("n")
    extra = [c for c in frame if c not in COLUMNS]  # scores of further test splits
    ordered = ordered[:at] + extra + ordered[at:]
    if "note" in ordered and frame["note"].isna().all():
        ordered.remove("note")
    return frame[ordered]


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def display_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """For people: each BLEU with its spread, `26.59 ± 0.31`, and the std columns folded in."""
    out = frame.copy()
    for column in [c for c in frame if c.startswith("BLEU std")]:
        mean = column.replace("BLEU std", "BLEU")
        pairs = zip(frame[mean], frame[column], strict=True)
        out[mean] = [_cell(m) if s is None or pd.isna(s) else f"{m} ± {s}" for m, s in pairs]
        out = out.drop(columns=column)
    return out


def to_markdown(frame: pd.DataFrame) -> str:
    frame = display_frame(frame)
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.astype(object).itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_summary(root: Path, frame: pd.DataFrame) -> None:
    write_text(root / "summary.md", to_markdown(frame))
    write_text(root / "summary.csv", frame.to_csv(index=False))
