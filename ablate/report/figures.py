"""What every plot of a report shares: whether matplotlib is there, a figure saved deterministically, and
the mean over seeds with its min-to-max band."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def mean_band(series: list[list[tuple[float, float]]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, and the mean, min and max of y over seeds, at the points every seed reached (x: the seeds' mean there)."""
    if not series:
        return [], [], [], []
    length = min(map(len, series))
    xs = [statistics.fmean(s[i][0] for s in series) for i in range(length)]
    ys = [[s[i][1] for s in series] for i in range(length)]
    return xs, [statistics.fmean(y) for y in ys], [min(y) for y in ys], [max(y) for y in ys]


def save_figure(fig, directory: Path, name: str) -> list[Path]:
    """Writes the figure as NAME.png and NAME.svg and closes it; the paths. The SVG is the same for the same figure
    whichever plot a process draws first (no churn in git), its text text: smaller, selectable on the page."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with plt.rc_context({"svg.hashsalt": "ablate", "svg.fonttype": "none"}):
        for suffix in ("png", "svg"):
            fig.savefig(directory / f"{name}.{suffix}", dpi=150, metadata={"Date": None} if suffix == "svg" else None)
    plt.close(fig)
    return [directory / f"{name}.png", directory / f"{name}.svg"]
