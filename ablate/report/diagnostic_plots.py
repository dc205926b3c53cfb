"""The diagnostics' pictures, from diagnostics.jsonl (ablate.model.diagnostics): a line a run, in its colour everywhere.

gradnorm: the gradient norm of each sublayer at initialisation and at the end (Xiong et al. 2020);
entropy and max_logit: each attention layer's entropy and largest logit over training (Zhai et al. 2023,
Dehghani et al. 2023); norms: the residual stream's norm by layer and the output logits' over training.
ablate.report.plots draws them with the rest (`write_plots`), and holds their captions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.report.figures import mean_band, save_figure
from ablate.report.results import ExperimentResults


def _by_step(
    seeds: list[list[dict[str, Any]]], field: str, key: str | None = None, reduce: Callable[[Any], float] = float
) -> tuple[list[float], list[float], list[float], list[float]]:
    """The steps every seed measured, and the mean, min and max over seeds of `reduce(record[field][key])` there."""
    series = []
    for records in seeds:
        values = {r["step"]: r.get(field) if key is None else r.get(field, {}).get(key) for r in records}
        series.append({step: reduce(v) for step, v in values.items() if v is not None})
    steps = sorted(set.intersection(*(set(s) for s in series))) if series else []
    return mean_band([[(step, s[step]) for step in steps] for s in series])


def _diagnosed(exp: ExperimentResults) -> dict[str, list[list[dict[str, Any]]]]:
    """Run -> the diagnostics of each of its seeds that has any (diverged seeds too: they are what is explained)."""
    out = {run: [d for d in (j.diagnostics() for j in jobs) if d] for run, jobs in exp.runs.items()}
    return {run: seeds for run, seeds in out.items() if seeds}


def _keys(seeds_by_run: dict[str, list[list[dict[str, Any]]]], field: str) -> list[str]:
    """Every key of a diagnostics field (sublayers, layers) in the model's order, which each record keeps.

    Runs may differ (only Pre-LN has a `final_norm`): a key first seen in a later record goes right after
    the key before it there, so `encoder.final_norm` stays between the encoder and the decoder.
    """
    out: list[str] = []
    for records in (r for seeds in seeds_by_run.values() for r in seeds):
        for record in records:
            previous = -1
            for key in record.get(field, {}):
                if key not in out:
                    out.insert(previous + 1, key)
                previous = out.index(key)
    return out


def gradient_norms(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """gradnorm.{png,svg}: gradient norm by sublayer at initialisation and at the end (log y), a line a run."""
    import matplotlib.pyplot as plt

    diagnosed = _diagnosed(exp)
    sublayers = _keys(diagnosed, "grad_norm")
    if not sublayers:
        return []
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 0.22 * len(sublayers) + 2), 8), sharex=True, sharey=True)
    for ax, (when, pick) in zip(axes, (("at initialisation", 0), ("at the end", -1)), strict=True):
        for run, seeds in diagnosed.items():
            _across(ax, sublayers, seeds, pick, "grad_norm", color=colors[run], label=run)
        steps = sorted({r[pick]["step"] for seeds in diagnosed.values() for r in seeds})
        ax.set_title(f"{when} (step {', '.join(map(str, steps))})", fontsize="small")
        ax.set_yscale("log")
        ax.set_ylabel("gradient L2 norm (mean over seeds)", fontsize="small")
    axes[1].set_xticks(range(len(sublayers)), sublayers, rotation=90, fontsize="x-small")
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{exp.name}: gradient norm by sublayer")
    return save_figure(fig, directory, "gradnorm")


def _across(ax, keys: list[str], seeds: list[list[dict[str, Any]]], pick: int, field: str, **style) -> None:
    """A run's line across sublayers or layers at one record of each seed (0: the first, -1: the last).

    The mean over seeds; a key the run lacks (a Post-LN model has no `final_norm`) is skipped, a
    non-finite value (a diverged seed) leaves a gap.
    """
    xs, ys = [], []
    for x, key in enumerate(keys):
        values = [records[pick].get(field, {}).get(key) for records in seeds]
        if None not in values:
            xs.append(x)
            ys.append(statistics.fmean(values))
    ax.plot(xs, ys, marker="o", markersize=3, **style)


def _over_steps(ax, seeds: list[list[dict[str, Any]]], field: str, key: str | None, reduce: Callable[[Any], float],
                **style) -> list[float]:  # fmt: skip
    """A run's line over training (the mean over seeds, a band from min to max); the values drawn."""
    steps, mean, low, high = _by_step(seeds, field, key, reduce)
    ax.plot(steps, mean, **style)
    if len(seeds) > 1:
        ax.fill_between(steps, low, high, color=style.get("color"), alpha=0.2, linewidth=0)
    return mean + low + high


def _fit(ax, values: list[float]) -> None:
    """Y limits that fit the values of the runs that did not diverge.

    A diverged run's blow-up (logits of 1e20) then leaves the panel instead of flattening every other line.
    """
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        low, high = min(finite), max(finite)
        margin = 0.08 * (high - low) or 0.1 * abs(high) or 1.0
        ax.set_ylim(low - margin, high + margin)


def _steady(exp: ExperimentResults) -> set[str]:
    """The runs whose every seed completed."""
    return {run for run, jobs in exp.runs.items() if all(j.ok for j in jobs)}


def _place(key: str) -> tuple[str, int]:
    """`decoder.3.cross_attn` -> (`decoder cross_attn`, 3): a row of attention kind, a column of layer."""
    stack, _, rest = key.partition(".")
    layer, _, kind = rest.partition(".")
    return (f"{stack} {kind}", int(layer)) if layer.isdigit() else (key, 0)


def attention(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """entropy.{png,svg} and max_logit.{png,svg}: each attention layer over training, a line a run."""
    written = []
    diagnosed = _diagnosed(exp)
    for field, name, what, reduce in (
        ("attention_entropy", "entropy", "attention entropy (nats, mean over heads)", statistics.fmean),
        ("max_logit", "max_logit", "largest attention logit", float),
    ):
        written += _layer_grid(exp.name, diagnosed, _steady(exp), colors, field, reduce, what, directory, name)
    return written


def _layer_grid(title: str, diagnosed: dict[str, list[list[dict[str, Any]]]], steady: set[str],
                colors: dict[str, str], field: str, reduce: Callable[[Any], float], what: str, directory: Path,
                name: str) -> list[Path]:  # fmt: skip
    """A panel an attention layer, a row a kind (encoder self, decoder self, cross), x = step, a line a run."""
    import matplotlib.pyplot as plt

    keys = _keys(diagnosed, field)
    if not keys:
        return []
    kinds = list(dict.fromkeys(_place(k)[0] for k in keys))
    layers = max(_place(k)[1] for k in keys) + 1
    fig, axes = plt.subplots(len(kinds), layers, figsize=(2.8 * layers + 1, 2.3 * len(kinds) + 1), squeeze=False,
                             sharex=True, sharey="row")  # fmt: skip
    for ax in axes.flat:
        ax.set_visible(False)  # shown when a layer is there
    fitted: list[list[float]] = [[] for _ in kinds]  # a row's values of the runs that did not diverge
    for key in keys:
        kind, layer = _place(key)
        ax = axes[kinds.index(kind)][layer]
        ax.set_visible(True)
        for run, seeds in diagnosed.items():
            drawn = _over_steps(ax, seeds, field, key, reduce, color=colors[run], label=run)
            fitted[kinds.index(kind)] += drawn if run in steady else []
        ax.set_title(f"{kind}, layer {layer}", fontsize="small")
    for row, values in zip(axes, fitted, strict=True):
        row[0].set_ylabel(what.split(" (")[0], fontsize="small")
        if set(diagnosed) - steady:
            _fit(row[0], values)  # the row shares its y axis
    for ax in axes[-1]:
        ax.set_xlabel("step")
    next(ax for ax in axes.flat if ax.get_visible()).legend(fontsize="x-small")
    fig.suptitle(f"{title}: {what} by layer\n(lines: mean over seeds; bands: min to max)", fontsize="medium")
    return save_figure(fig, directory, name)


def norms(exp: ExperimentResults, colors: dict[str, str], directory: Path) -> list[Path]:
    """norms.{png,svg}: residual-stream norm by layer (at initialisation, at the end) and logits norm over training."""
    import matplotlib.pyplot as plt

    diagnosed = _diagnosed(exp)
    layers = _keys(diagnosed, "residual_norm")
    logits = any("logits_norm" in d for seeds in diagnosed.values() for r in seeds for d in r)
    if not layers and not logits:
        return []
    fig, (by_layer, over_steps) = plt.subplots(1, 2, figsize=(11, 4.5))
    steady, fitted = _steady(exp), []
    for run, seeds in diagnosed.items():
        _across(by_layer, layers, seeds, 0, "residual_norm", linestyle="--", color=colors[run])
        _across(by_layer, layers, seeds, -1, "residual_norm", color=colors[run], label=run)
        drawn = _over_steps(over_steps, seeds, "logits_norm", None, float, color=colors[run], label=run)
        fitted += drawn if run in steady else []
    if set(diagnosed) - steady:
        _fit(over_steps, fitted)
    by_layer.set_xticks(range(len(layers)), layers, rotation=90, fontsize="x-small")
    by_layer.set_yscale("log")
    by_layer.set_ylabel("residual stream L2 norm")
    by_layer.set_title("after each layer: at initialisation (dashed), at the end (solid)", fontsize="small")
    over_steps.set_xlabel("step")
    over_steps.set_ylabel("logits L2 norm a target token")
    over_steps.legend(fontsize="small")
    fig.suptitle(f"{exp.name}: norms (mean over seeds)")
    return save_figure(fig, directory, "norms")
