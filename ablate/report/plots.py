"""Pictures of an experiment, from its result files (PNG and SVG): what each run learned, and why.

Learning curves and BLEU from metrics.jsonl and result.json; BLEU by source length; from
diagnostics.jsonl, gradient norms by sublayer, attention entropy and logits by layer, and the norms of
the residual stream and the logits. A run keeps one colour in every plot. matplotlib is a dependency
of ablate; without it `ablate report` says so and writes the tables and the page alone.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ablate.record import Status
from ablate.report.breakdown import bucket_sizes, by_length
from ablate.report.budgets import Budgets
from ablate.report.diagnostic_plots import attention, gradient_norms, norms
from ablate.report.figures import mean_band, save_figure
from ablate.report.forest import CAPTION as FOREST_CAPTION
from ablate.report.results import ExperimentResults, JobRecord, bleus
from ablate.report.significance import Interval

SMOOTHING = 50  # the training loss is averaged (EMA) over 1/SMOOTHING of the run's steps
MAX_POINTS = 500  # points drawn a line (about one a pixel of the PNG): long runs keep small SVGs

FITTED = " The y axis fits the runs that did not diverge: a diverged run's blow-up leaves the panel."

# What each plot shows, as the page captions it
CAPTIONS = {
    "forest": FOREST_CAPTION,
    "curves": f"Training loss (an exponential moving average over 1/{SMOOTHING} of the run, raw values faint), "
    "validation loss and validation BLEU, against step and against wall time; a line is the mean over the "
    "completed seeds, a band their min to max.",
    "bleu": "Test BLEU, the mean over seeds, with the std over seeds as error bars.",
    "lr": "Final validation loss against the peak learning rate, capped at the loss at initialisation.",
    "budgets": "ΔBLEU against the baseline at the same budget point (log axis), its 95% interval over seeds and "
    "test sentences as a band; and the validation loss of the model decoded there, the mean over seeds.",
    "length": "Test BLEU by source length in words (compare-mt's buckets): a line is the mean over the "
    "completed seeds, a band their min to max.",
    "gradnorm": "L2 norm of the gradient of each sublayer's parameters, at initialisation (before the first "
    "update) and at the last measurement, in model order; the mean over seeds.",
    "entropy": "Attention entropy (nats, the mean over heads) of each attention layer over training; low "
    "entropy is attention on few tokens, log(length) is uniform attention." + FITTED,
    "max_logit": "The largest scaled attention logit q·k·scale of each attention layer over training; "
    "logits that keep growing go with attention entropy collapse and instability (Dehghani et al. 2023, "
    "Wortsman et al. 2023)." + FITTED,
    "norms": "The mean L2 norm of the residual stream after each layer, at initialisation (dashed) and at "
    "the end (solid), and of the output logits a target token over training." + FITTED,
}


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


def training_curve(job: JobRecord) -> list[tuple[int, float, float]]:
    """(step, wall seconds since the job started, training loss) at each optimizer step."""
    out, seconds = [], 0.0
    for record in job.metrics():
        if "loss" in record and "step_ms" in record:
            seconds += record["step_ms"] / 1000
            out.append((record["step"], record.get("wall_s", seconds), record["loss"]))
    return out


def smooth(values: list[float], span: float) -> list[float]:
    """An exponential moving average with weight 2 / (span + 1) on each new value, started at the first one."""
    weight, out = 2 / (span + 1), []
    for value in values:
        out.append(value if not out else out[-1] + weight * (value - out[-1]))
    return out


def _thin(points: list[Any]) -> list[Any]:
    return points[:: max(1, math.ceil(len(points) / MAX_POINTS))]


def write_plots(exp: ExperimentResults, directory: Path, budgets: Budgets | None = None) -> list[Path]:
    """Every plot the experiment's files allow; the paths written (a PNG and an SVG a plot)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {run: cycle[i % len(cycle)] for i, run in enumerate(exp.runs)}
    written = []
    for draw in (learning_curves, bleu_bars, learning_rates, lengths, gradient_norms, attention, norms):
        written += draw(exp, colors, directory)
    if budgets is not None:
        written += budget_plot(exp, budgets, colors, directory)
    return written


def budget_plot(exp: ExperimentResults, budgets: Budgets, colors: dict[str, str], directory: Path) -> list[Path]:
    """budgets.{png,svg}: ΔBLEU against budget (log axis) with its interval as a band; validation loss beside it."""
    import matplotlib.pyplot as plt

    fig, (delta_ax, loss_ax) = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    frame = budgets.frame.to_dict("records")
    for run, color in colors.items():
        rows = [r for r in frame if r["run"] == run]
        points = [(float(r["budget"]), r) for r in rows]
        delta = [(b, r) for b, r in points if r["ΔBLEU"] is not None]
        if delta:
            xs = [b for b, _ in delta]
            delta_ax.plot(xs, [r["ΔBLEU"] for _, r in delta], color=color, marker="o", markersize=3, label=run)
            delta_ax.fill_between(xs, [r["ΔBLEU lo"] for _, r in delta], [r["ΔBLEU hi"] for _, r in delta],
                                  color=color, alpha=0.15, linewidth=0)  # fmt: skip
        loss = [(b, r["valid loss"]) for b, r in points if r["valid loss"] is not None]
        if loss:
            loss_ax.plot([b for b, _ in loss], [v for _, v in loss], color=color, marker="o", markersize=3, label=run)
    delta_ax.axhline(0.0, color="grey", linewidth=0.8)
    for ax, ylabel in ((delta_ax, f"ΔBLEU against the baseline, {exp.split()}"), (loss_ax, "validation loss")):
        ax.set_xscale("log")
        ax.set_xlabel(f"budget ({budgets.unit})" if budgets.unit else "budget")
        ax.set_ylabel(ylabel)
        ax.set_xticks(budgets.points, [f"{b:g}" for b in budgets.points])
        ax.minorticks_off()
    loss_ax.legend(fontsize="small")
    fig.suptitle(f"{exp.name}: effect against compute (bands: 95% interval over {covered(budgets.intervals)})")
    return save_figure(fig, directory, "budgets")


def covered(intervals: dict[Any, Interval]) -> str:
    """What the budget plot's bands cover: seed variance only where both arms have two seeds or more."""
    seeds = {i.seeds for i in intervals.values()}
    if seeds == {False}:
        return "test sentences; one seed an arm"
    if seeds == {True}:
        return "seeds and sentences"
    return "seeds and sentences; sentences alone where an arm has one seed"


def learning_curves(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """curves.{png,svg}: training loss (smoothed), validation loss and BLEU, against step and wall time."""
    import matplotlib.pyplot as plt

    done = {run: [j for j in jobs if j.ok] for run, jobs in exp.runs.items()}
    train = {run: [c for c in map(training_curve, jobs) if c] for run, jobs in done.items()}
    valid = {run: [c for c in map(curve, jobs) if c] for run, jobs in done.items()}
    rows = [("training loss (EMA; raw faint)", 2), ("validation loss (nats a token)", 2)]
    if any(p[3] is not None for curves in valid.values() for c in curves for p in c):
        rows.append(("validation BLEU (greedy)", 3))  # a row only when validations decoded
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 3.2 * len(rows) + 0.5), sharex="col", sharey="row")
    for run, color in colors.items():
        for col in (0, 1):  # x: step, wall seconds
            if train[run]:
                _training_loss(axes[0][col], train[run], col, color, run)
            for row, (_, y) in enumerate(rows[1:], start=1):
                series = [s for s in ([(p[col], p[y]) for p in c if p[y] is not None] for c in valid[run]) if s]
                if series:
                    _line(axes[row][col], series, color, run, marker="o")
    for col, xlabel in enumerate(("step", "wall time (s)")):
        axes[-1][col].set_xlabel(xlabel)
    for row, (ylabel, _) in enumerate(rows):
        axes[row][0].set_ylabel(ylabel)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"{exp.name}: learning curves (lines: mean over seeds; bands: min to max)")
    return save_figure(fig, directory, "curves")


def _training_loss(ax, curves: list[list[tuple[int, float, float]]], col: int, color: str, label: str) -> None:
    """Each seed's raw loss faint; their EMAs' mean as a line and min to max as a band."""
    for c in curves:
        raw = _thin(c)
        ax.plot([p[col] for p in raw], [p[2] for p in raw], color=color, alpha=0.15, linewidth=0.5)
    span = max(1.0, max(map(len, curves)) / SMOOTHING)
    _line(ax, [_thin(list(zip([p[col] for p in c], smooth([p[2] for p in c], span), strict=True))) for c in curves],
          color, label)  # fmt: skip


def _line(ax, series: list[list[tuple[float, float]]], color: str, label: str, **style) -> None:
    """The mean over seeds as a line, their min to max as a band when there are several."""
    xs, mean, low, high = mean_band(series)
    ax.plot(xs, mean, color=color, label=label, markersize=3, **style)
    if len(series) > 1:
        ax.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)


def bleu_bars(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """bleu.{png,svg}: test BLEU a run, with the std over seeds as error bars."""
    import matplotlib.pyplot as plt

    split = exp.split()
    bars = []
    for run, jobs in exp.runs.items():
        bleu = bleus(jobs, split)
        if bleu:
            bars.append((run, statistics.fmean(bleu), statistics.stdev(bleu) if len(bleu) > 1 else 0.0, len(bleu)))
    if not bars:
        return []
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(bars) + 2), 4))
    ax.bar([b[0] for b in bars], [b[1] for b in bars], yerr=[b[2] for b in bars], capsize=4,
           color=[colors[b[0]] for b in bars])  # fmt: skip
    for i, (_, mean, _, n) in enumerate(bars):
        ax.annotate(f"{mean:.2f}\nn={n}", (i, mean), ha="center", va="bottom", fontsize="small",
                    xytext=(0, 4), textcoords="offset points")  # fmt: skip
    ax.set_ylabel(f"BLEU, {split} (error bars: std over seeds)")
    ax.set_title(exp.name)
    ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, directory, "bleu")


def learning_rates(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """lr.{png,svg}: final validation loss against the peak learning rate (log x), a line a run, seeds as bands.

    The loss is capped at the loss at initialisation, as the sensitivity figure counts it (ablate.report.sensitivity);
    a rate where a seed diverged is marked with a cross.
    """
    import matplotlib.pyplot as plt

    from ablate.report.sensitivity import arms, swept

    if not swept(exp):
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for arm, points in arms(exp).items():
        scored = [(p.lr, p.losses(), p) for p in points if p.losses()]
        if not scored:
            continue
        xs = [lr for lr, _, _ in scored]
        (line,) = ax.plot(xs, [statistics.fmean(v) for _, v, _ in scored], marker="o", label=arm,
                          color=colors.get(arm))  # fmt: skip
        if any(len(v) > 1 for _, v, _ in scored):
            ax.fill_between(xs, [min(v) for _, v, _ in scored], [max(v) for _, v, _ in scored],
                            color=line.get_color(), alpha=0.2)  # fmt: skip
        for lr, v, p in scored:
            if any(j.result.status == Status.DIVERGED for j in p.jobs):
                ax.plot([lr], [max(v)], marker="x", markersize=10, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss (nats a token, capped at init)")
    ax.set_title(f"{exp.name}: learning-rate sensitivity (bands: min to max over seeds; x: a seed diverged)",
                 fontsize="small")  # fmt: skip
    ax.legend(fontsize="small")
    return save_figure(fig, directory, "lr")


def lengths(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """length.{png,svg}: test BLEU by source-length bucket, a line a run; nothing when no run has buckets."""
    import matplotlib.pyplot as plt

    split = exp.split()
    scores = {run: b for run, jobs in exp.runs.items() if (b := by_length(jobs, split))}
    if not scores:
        return []
    labels = list(dict.fromkeys(label for buckets in scores.values() for label in buckets))
    sizes = bucket_sizes(exp, split)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(labels) + 2), 4.5))
    for run, buckets in scores.items():
        scored = {label: v for label, v in buckets.items() if v}  # an empty bucket has no BLEU: no point
        xs, values = [labels.index(label) for label in scored], list(scored.values())
        ax.plot(xs, [statistics.fmean(v) for v in values], marker="o", markersize=3, color=colors[run], label=run)
        if any(len(v) > 1 for v in values):
            ax.fill_between(xs, list(map(min, values)), list(map(max, values)), color=colors[run], alpha=0.2,
                            linewidth=0)  # fmt: skip
    ticks = [f"{label}\n{sizes[label].sentences} sent." if label in sizes else label for label in labels]
    ax.set_xticks(range(len(labels)), ticks)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel(f"BLEU, {split}")
    ax.set_title(f"{exp.name}: BLEU by source length (lines: mean over seeds; bands: min to max)", fontsize="small")
    ax.legend(fontsize="small")
    return save_figure(fig, directory, "length")
