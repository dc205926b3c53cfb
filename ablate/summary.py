"""The comparison table of an experiment, from result records alone (no torch, no model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ablate.results import write_text

COLUMNS = ["run", "differs", "params", "BLEU", "chrF", "train tok/s (src/tgt)", "step ms", "decode sent/s",
           "peak MiB", "wall s", "status"]  # fmt: skip


def summary_frame(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row a run; BLEU and chrF of each test split. A run that diverged or failed shows no numbers."""
    rows = []
    for r in results:
        ok = r.get("status") == "completed"
        row: dict[str, Any] = {"run": r["run"], "differs": r.get("describe", "-"), "params": r.get("params")}
        for split, s in (r.get("scores") or {}).items():
            suffix = "" if len(r["scores"]) == 1 else f" {split}"
            row[f"BLEU{suffix}"] = s["bleu"] if ok else None
            row[f"chrF{suffix}"] = s["chrf"] if ok else None
        src, tgt = r.get("train_src_tokens_per_s"), r.get("train_tgt_tokens_per_s")
        row["train tok/s (src/tgt)"] = f"{src:,.0f} / {tgt:,.0f}" if src is not None else None
        row["step ms"] = r.get("step_ms")
        row["decode sent/s"] = r.get("decode_sentences_per_s") if ok else None
        row["peak MiB"] = r.get("peak_memory_mib")
        row["wall s"] = r.get("wall_seconds")
        row["status"] = r["status"]
        rows.append(row)
    frame = pd.DataFrame(rows, dtype=object)  # ints stay ints, missing stays None
    if "BLEU" not in frame:
        frame["BLEU"], frame["chrF"] = None, None
    first = [c for c in COLUMNS if c in frame and c != "status"]
    scores = [c for c in frame if c not in COLUMNS and c != "status"]
    ordered = first[:3] + [c for c in ["BLEU", "chrF"] if c in frame] + scores + first[5:] + ["status"]
    return frame[list(dict.fromkeys(ordered))]


def to_markdown(frame: pd.DataFrame) -> str:
    def cell(value: Any) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "-"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.astype(object).itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_summary(root: Path, frame: pd.DataFrame) -> None:
    write_text(root / "summary.md", to_markdown(frame))
    write_text(root / "summary.csv", frame.to_csv(index=False))
