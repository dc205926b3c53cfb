"""report/cards.md: each run's card, where its spec departs from the paper's base model (ablate.report.paper) and
what each of its seeds cost as it trained, where it trained. Torch-free, as the whole report is."""

from __future__ import annotations

from ablate.record import RunResult
from ablate.report.frame import BUSY
from ablate.report.paper import paper_differences
from ablate.report.results import ExperimentResults


def cards(exp: ExperimentResults) -> str:
    """Each run's card: where its resolved spec departs from the paper's base model (Vaswani et al. 2017), and
    what each seed cost as it trained."""
    lines = [f"# Run cards: {exp.name}", "", "Where each run departs from the paper's base model "
             "(Vaswani et al. 2017); anything not listed is as in the paper. Then what each seed cost as it "
             "trained, on its own machine and beside whatever else ran there: the comparison table's speeds come "
             "from `ablate bench` where the experiment has a speed.json.", ""]  # fmt: skip
    for run, jobs in exp.runs.items():
        lines.append(f"## {run}" + (f" ({jobs[0].result.describe})" if run != "baseline" else ""))
        lines.append("")
        lines += [f"- `{key}`: {this} (paper: {paper}, {where})" for key, paper, this, where in
                  paper_differences(jobs[0].config)] or ["- nothing: this is the paper's base model"]  # fmt: skip
        lines += ["", "As trained:", ""] + [f"- seed {job.result.seed}: {cost(job.result)}" for job in jobs]
        lines.append("")
    return "\n".join(lines)


def cost(r: RunResult) -> str:
    """What one seed cost as it trained: its length and wall time, where and how it trained, its speed and memory,
    and what shared its machine (a busy machine's speed measures the machine as much as the run)."""
    length = ", ".join(part for part in (
        f"{r.steps:,} steps" if r.steps is not None else "",
        f"{r.epochs:.2f} epochs" if r.epochs is not None else "",
        f"{duration(r.wall_seconds)} of wall time" if r.wall_seconds is not None else "",
    ) if part)  # fmt: skip
    where = ", ".join(str(part) for part in (r.device, r.precision, f"{r.processes} processes"
                                             if (r.processes or 1) > 1 else None) if part)  # fmt: skip
    speed = ", ".join(part for part in (
        f"{r.train_tgt_tokens_per_s:,.0f} target tokens/s" if r.train_tgt_tokens_per_s is not None else "",
        f"{r.step_ms:,.0f} ms a step" if r.step_ms is not None else "",
        f"peak {r.peak_memory_mib:,.0f} MiB" if r.peak_memory_mib is not None else "",
    ) if part)  # fmt: skip
    shared = []
    if r.core_share is not None and r.core_share < BUSY:
        shared.append(f"other processes took {1 - r.core_share:.0%} of its cores' time")
    if (r.runs_per_gpu or 1) > 1:
        shared.append(f"its GPU shared by up to {r.runs_per_gpu} runs")
    if r.slurm_restarts:
        shared.append(f"requeued {r.slurm_restarts} time(s) by Slurm")
    parts = [str(r.status), length, where, speed, *shared]
    if r.reused_from:
        parts.append(f"the result of {r.reused_from}, reused (the same spec and seed)")
    return "; ".join(part for part in parts if part)


def duration(seconds: float) -> str:
    """58 s, 14 min, 2 h 21 min."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
