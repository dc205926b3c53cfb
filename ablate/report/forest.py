"""The forest plot: each row's ΔBLEU with its 95% interval, the declared margin shaded, the verdict marked; a panel
for the comparison and one for each budget point where runs have several. From the report's own tables, so the
plot and the tables cannot disagree. No torch; matplotlib only where the report draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ablate.report.budgets import Budgets
from ablate.report.figures import save_figure

# How a verdict is drawn: (marker, filled); a row with one seed is an open diamond whatever its interval
MARKERS = {"better": ("o", True), "worse": ("o", True), "equivalent": ("s", True), "undecided": ("o", False)}
ONE_SEED_MARKER = ("D", False)

CAPTION = ("ΔBLEU against the baseline with its 95% interval over seeds and test sentences, a row a run; the "
           "declared margin of equivalence shaded grey; filled: better or worse (circle) or equivalent (square), "
           "after the correction over the table's rows; open circle: undecided; open diamond: an arm of one seed, "
           "no verdict. A panel for the comparison and one for each budget point.")  # fmt: skip


@dataclass(frozen=True)
class Row:
    run: str
    delta: float
    low: float
    high: float
    verdict: str


def rows_of(frame: pd.DataFrame) -> list[Row]:
    """The rows of a comparison or budget table that have an interval, in its order."""
    out = []
    for record in frame.to_dict("records"):
        values = [record.get(k) for k in ("ΔBLEU", "ΔBLEU lo", "ΔBLEU hi")]
        if any(v is None or pd.isna(v) for v in values):
            continue
        verdict = record.get("verdict")
        out.append(Row(str(record["run"]), *(float(v) for v in values), "" if pd.isna(verdict) else str(verdict)))
    return out


def panels(comparison: pd.DataFrame, budgets: Budgets | None) -> list[tuple[str, list[Row]]]:
    """(title, rows) a panel: the comparison, then each budget point's rows."""
    out = [("the comparison", rows_of(comparison))] if comparison is not None else []
    if budgets is not None:
        frame = budgets.frame
        for budget in dict.fromkeys(frame["budget"]):
            out.append((f"at {budget} {budgets.unit}".strip(), rows_of(frame[frame["budget"] == budget])))
    return [(title, rows) for title, rows in out if rows]


def forest_plot(name: str, comparison: pd.DataFrame, margin: float | None, budgets: Budgets | None,
                directory: Path, margin_text: str = "",
                xlim: tuple[float, float] | None = None) -> list[Path]:  # fmt: skip
    """forest.{png,svg}; nothing when no row has an interval. `xlim`: the ΔBLEU axis, a row beyond it drawn as an
    arrow at the edge with its value."""
    import matplotlib.pyplot as plt

    drawn = panels(comparison, budgets)
    if not drawn:
        return []
    runs = list(dict.fromkeys(r.run for _, rows in drawn for r in rows))
    width = 4.2 * len(drawn)
    fig, axes = plt.subplots(1, len(drawn), figsize=(max(width, 6.5), 1.2 + 0.42 * len(runs)), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, (title, rows) in zip(axes[0], drawn, strict=True):
        _panel(ax, title, rows, runs, margin, xlim)
    axes[0][0].set_yticks(range(len(runs)), runs)
    axes[0][0].invert_yaxis()
    said = f"; margin ±{margin:g} BLEU" if margin is not None else "; no margin declared"
    if "a view" in margin_text:
        said += " (a view: " + margin_text.split("(a view; ")[-1]
    fig.suptitle(f"{name}: ΔBLEU [95% interval]{said}", fontsize="medium")
    fig.tight_layout()
    return save_figure(fig, directory, "forest")


def _panel(ax, title: str, rows: Sequence[Row], runs: list[str], margin: float | None,
           xlim: tuple[float, float] | None = None) -> None:  # fmt: skip
    if margin is not None:
        ax.axvspan(-margin, margin, color="0.9", zorder=0)
    ax.axvline(0.0, color="0.5", linewidth=0.8, zorder=1)
    for row in rows:
        y = runs.index(row.run)
        if xlim is not None and (row.high < xlim[0] or row.low > xlim[1]):  # off the axis: an arrow at its edge
            left = row.high < xlim[0]
            edge = xlim[0] if left else xlim[1]
            ax.plot([edge], [y], marker="<" if left else ">", color="C3" if row.verdict.startswith("worse") else "C0")
            ax.annotate(f"{row.delta:+.2f} [{row.low:+.2f}, {row.high:+.2f}] {row.verdict}".replace("-", "−"),
                        (edge, y), xytext=(8 if left else -8, 0), textcoords="offset points", va="center",
                        ha="left" if left else "right", fontsize="x-small", color="0.3")  # fmt: skip
            continue
        marker, filled = ONE_SEED_MARKER if "1 seed" in row.verdict else MARKERS.get(row.verdict.split(" (")[0],
                                                                                       ("o", False))  # fmt: skip
        color = (
            "C3" if row.verdict.startswith("worse") else "C2" if row.verdict.startswith(("better", "equiv")) else "C0"
        )
        ax.plot([row.low, row.high], [y, y], color=color, linewidth=1.6, zorder=2)
        ax.plot([row.delta], [y], marker=marker, color=color, markerfacecolor=color if filled else "white",
                markersize=6, zorder=3)  # fmt: skip
        ax.annotate(row.verdict, (row.high, y), xytext=(4, 0), textcoords="offset points", va="center",
                    fontsize="x-small", color="0.3")  # fmt: skip
    ax.set_title(title, fontsize="small")
    ax.set_xlabel("ΔBLEU")
    if xlim is not None:
        ax.set_xlim(*xlim)
    else:
        ax.margins(x=0.25)
