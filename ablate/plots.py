"""Pictures of an experiment, from its result files: learning curves and BLEU with error bars (PNG and SVG).

matplotlib is an optional extra (`pip install 'ablate[plot]'`); without it `ablate report` says so
and writes the tables alone.
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

from ablate.report import ExperimentResults, JobRecord


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def curve(job: JobRecord) -> list[tuple[int, float, float, float | None]]:
    """(step, wall seconds since the job started, validation loss, validation BLEU) at each validation.

    Logs written before records carried `wall_s` give the time of optimizer steps alone instead.
    """
    out, seconds = [], 0.0
    for record in job.metrics():
        if "step_ms" in record:
            seconds += record["step_ms"] / 1000
        elif "valid_loss" in record:
            out.append((record["step"], record.get("wall_s", seconds), record["valid_loss"], record.get("valid_bleu")))
    return out


def _band(series: list[list[tuple[float, float]]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, and the mean, min and max of y over seeds, at the validations every seed reached."""
    length = min(map(len, series))
    xs = [statistics.fmean(s[i][0] for s in series) for i in range(length)]
    ys = [[s[i][1] for s in series] for i in range(length)]
    return xs, [statistics.fmean(y) for y in ys], [min(y) for y in ys], [max(y) for y in ys]


def write_plots(exp: ExperimentResults, directory: Path) -> list[Path]:
    """curves.{png,svg} (validation loss and BLEU against step and training time) and bleu.{png,svg}."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "ablate"  # the same figure gives the same SVG: no churn in git

    written = []
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey="row")
    for run, jobs in exp.runs.items():
        curves = [c for c in (curve(j) for j in jobs if j.result.get("status") == "completed") if c]
        if not curves:
            continue
        for col, x_index in enumerate((0, 1)):
            for row, y_index in enumerate((2, 3)):
                series = [[(p[x_index], p[y_index]) for p in c if p[y_index] is not None] for c in curves]
                series = [s for s in series if s]
                if not series:
                    continue
                xs, mean, low, high = _band(series)
                ax = axes[row][col]
                (line,) = ax.plot(xs, mean, label=run, marker="o", markersize=3)
                if len(series) > 1:
                    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
    for col, xlabel in enumerate(("step", "wall time (s)")):
        axes[1][col].set_xlabel(xlabel)
    axes[0][0].set_ylabel("validation loss (nats a token)")
    axes[1][0].set_ylabel("validation BLEU (greedy)")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"{exp.name}: learning curves (bands: min to max over seeds)")
    fig.tight_layout()
    for suffix in ("png", "svg"):
        fig.savefig(directory / f"curves.{suffix}", dpi=150, metadata={"Date": None} if suffix == "svg" else None)
        written.append(directory / f"curves.{suffix}")
    plt.close(fig)

    split = exp.split()
    bars = []
    for run, jobs in exp.runs.items():
        bleu = [j.result["scores"][split]["bleu"] for j in jobs if split and j.ok and split in j.result["scores"]]
        if bleu:
            bars.append((run, statistics.fmean(bleu), statistics.stdev(bleu) if len(bleu) > 1 else 0.0, len(bleu)))
    if bars:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(bars) + 2), 4))
        ax.bar([b[0] for b in bars], [b[1] for b in bars], yerr=[b[2] for b in bars], capsize=4, color="#4c72b0")
        for i, (_, mean, _, n) in enumerate(bars):
            ax.annotate(f"{mean:.2f}\nn={n}", (i, mean), ha="center", va="bottom", fontsize="small",
                        xytext=(0, 4), textcoords="offset points")  # fmt: skip
        ax.set_ylabel(f"BLEU, {split} (error bars: std over seeds)")
        ax.set_title(exp.name)
        ax.tick_params(axis="x", rotation=30)
        fig.tight_layout()
        for suffix in ("png", "svg"):
            fig.savefig(directory / f"bleu.{suffix}", dpi=150, metadata={"Date": None} if suffix == "svg" else None)
            written.append(directory / f"bleu.{suffix}")
        plt.close(fig)
    return written + learning_rates(exp, directory)


def learning_rates(exp: ExperimentResults, directory: Path) -> list[Path]:
    """lr.{png,svg}: final validation loss against the peak learning rate (log x), a line a run, seeds as bands.

    The loss is capped at the loss at initialisation, as the sensitivity figure counts it (ablate.sensitivity);
    a rate where a seed diverged is marked with a cross.
    """
    import matplotlib.pyplot as plt

    from ablate.sensitivity import arms, swept

    if not swept(exp):
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for arm, points in arms(exp).items():
        scored = [(p.lr, p.losses(), p) for p in points if p.losses()]
        if not scored:
            continue
        xs = [lr for lr, _, _ in scored]
        (line,) = ax.plot(xs, [statistics.fmean(v) for _, v, _ in scored], marker="o", label=arm)
        if any(len(v) > 1 for _, v, _ in scored):
            ax.fill_between(xs, [min(v) for _, v, _ in scored], [max(v) for _, v, _ in scored],
                            color=line.get_color(), alpha=0.2)  # fmt: skip
        for lr, v, p in scored:
            if any(j.result.get("status") == "diverged" for j in p.jobs):
                ax.plot([lr], [max(v)], marker="x", markersize=10, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss (nats a token, capped at init)")
    ax.set_title(f"{exp.name}: learning-rate sensitivity (bands: min to max over seeds; x: a seed diverged)",
                 fontsize="small")  # fmt: skip
    ax.legend(fontsize="small")
    fig.tight_layout()
    written = []
    for suffix in ("png", "svg"):
        fig.savefig(directory / f"lr.{suffix}", dpi=150, metadata={"Date": None} if suffix == "svg" else None)
        written.append(directory / f"lr.{suffix}")
    plt.close(fig)
    return written
