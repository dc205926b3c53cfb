"""The forest plot: each row's ΔBLEU with its 95% interval, the declared margin shaded, the verdict marked; the
comparison large, and a small panel for each budget point under it where runs have several. From the report's own
tables, so the plot and the tables cannot disagree. No torch; matplotlib only where the report draws.
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
           "no verdict. The comparison across the page; under it a small panel for each budget point, its rows "
           "judged as the comparison's are (the same margin, corrected over that point's rows), so the same runs at "
           "the same point read the same.")  # fmt: skip


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


WIDTH = 11.0  # inches: the page's full width, where an inch of the figure shows at about an inch
ACROSS = 4  # budget panels in a row under the comparison


def forest_plot(name: str, comparison: pd.DataFrame, margin: float | None, budgets: Budgets | None,
                directory: Path, margin_text: str = "", xlim: tuple[float, float] | None = None,
                view: str = "") -> list[Path]:  # fmt: skip
    """forest.{png,svg}: the comparison large, across the page, and each budget point a small panel under it, judged
    alike (ablate.report.budgets); nothing when no row has an interval. `xlim`: the comparison's ΔBLEU axis, a row
    beyond it drawn as an arrow at the edge with its value. `view`: what a view changed, said in the title."""
    import matplotlib.pyplot as plt

    drawn = panels(comparison, budgets)
    if not drawn:
        return []
    (title, rows), small = drawn[0], drawn[1:]
    runs = list(dict.fromkeys(r.run for _, rows_ in drawn for r in rows_))
    lines = -(-len(small) // ACROSS)  # rows of small panels
    many = len(runs) > 8  # then rows closer together, and the small panels mark verdicts without words
    main_height, small_height = 0.7 + (0.2 if many else 0.3) * len(runs), 0.7 + (0.12 if many else 0.17) * len(runs)
    fig = plt.figure(figsize=(WIDTH, 0.45 + main_height + lines * small_height))
    grid = fig.add_gridspec(1 + lines, ACROSS, height_ratios=[main_height, *[small_height] * lines])
    main = fig.add_subplot(grid[0, :])
    _panel(main, title, rows, runs, margin, xlim, size=9)
    main.set_yticks(range(len(runs)), runs, fontsize=9)
    edges = [v for _, rows_ in small for r in rows_ for v in (r.low, r.high)] + ([-margin, margin] if margin else [])
    span = (min(edges), max(edges)) if edges else None
    for k, (title_, rows_) in enumerate(small):
        ax = fig.add_subplot(grid[1 + k // ACROSS, k % ACROSS])
        _panel(ax, title_, rows_, runs, margin, size=7, words=not many)
        ax.set_yticks(range(len(runs)), runs if k % ACROSS == 0 else [], fontsize=7)
        ax.tick_params(labelsize=7)
        if span is not None:  # one ΔBLEU axis for every budget point, so that they compare at a glance
            pad = 0.12 * (span[1] - span[0] or 1.0)
            ax.set_xlim(span[0] - pad, span[1] + (pad if many else 0.45 * (span[1] - span[0] or 1.0)))
    said = f"; margin ±{margin:g} BLEU" if margin is not None else "; no margin declared"
    if view:
        said += f" ({view})"
    elif "a view" in margin_text:
        said += " (a view: " + margin_text.split("(a view; ")[-1]
    fig.suptitle(f"{name}: ΔBLEU [95% interval]{said}", fontsize="medium")
    return save_figure(fig, directory, "forest")


def _panel(ax, title: str, rows: Sequence[Row], runs: list[str], margin: float | None,
           xlim: tuple[float, float] | None = None, size: float = 9, words: bool = True) -> None:  # fmt: skip
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
                        ha="left" if left else "right", fontsize=size - 1, color="0.3")  # fmt: skip
            continue
        marker, filled = ONE_SEED_MARKER if "1 seed" in row.verdict else MARKERS.get(row.verdict.split(" (")[0],
                                                                                       ("o", False))  # fmt: skip
        color = (
            "C3" if row.verdict.startswith("worse") else "C2" if row.verdict.startswith(("better", "equiv")) else "C0"
        )
        ax.plot([row.low, row.high], [y, y], color=color, linewidth=1.6, zorder=2)
        ax.plot([row.delta], [y], marker=marker, color=color, markerfacecolor=color if filled else "white",
                markersize=size - 3, zorder=3)  # fmt: skip
        if words:
            ax.annotate(row.verdict, (row.high, y), xytext=(4, 0), textcoords="offset points", va="center",
                        fontsize=size - 1, color="0.3")  # fmt: skip
    ax.set_title(title, fontsize=size + 1)
    ax.set_xlabel("ΔBLEU", fontsize=size)
    ax.set_ylim(len(runs) - 0.5, -0.5)
    if xlim is not None:
        ax.set_xlim(*xlim)
    else:
        ax.margins(x=0.25)
        low, high = ax.get_xlim()
        ax.set_xlim(low, high + 0.15 * (high - low))  # room for the verdict written right of each interval
