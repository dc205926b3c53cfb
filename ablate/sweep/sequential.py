"""`ablate run --until-decided --max-seeds N`: seeds added only where a row is undecided.

until_decided  the sequential sweep: every run's first seeds, then one more seed for each undecided row (and for
               the baseline where it limits every undecided row) until every row is decided or has --max-seeds
print_verdicts the verdict of every row, the look it was reached at, and the seeds it took against a fixed design

Each pass reads the finished seeds from the result files and replays every look from them (ablate.report.verdicts,
ablate.report.decide), then trains the seeds the next look needs through runner.sweep: a sweep killed anywhere
(kill -9 included) resumes where its design stands, a seed trained elsewhere with the same spec is reused by its
config hash, and the report shows the decisions this loop acted on. It computes no tensor itself, but imports torch
with the runner and the experiment's run specs (ablate.sweep.runner, ablate.train.spec).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ablate.record import DesignRecord, Status
from ablate.report.decide import Replay
from ablate.report.results import ExperimentResults, load_results
from ablate.report.tables import print_table
from ablate.report.verdicts import Declared, check_sequential, design, finished_seeds, sequential
from ablate.rundir import DESIGN, is_experiment, read_design
from ablate.sweep import runner
from ablate.sweep.design import declare
from ablate.sweep.experiment import Experiment


def state(experiment: Experiment, options: runner.Options, record: DesignRecord) -> tuple[Replay, dict[str, int]]:
    """Where the design stands, replayed from the result files, and how many of its seeds each run has finished."""
    root = options.results / experiment.name
    declared = Declared(design(record), record.seeds, f"declared in {root / DESIGN}")
    results = load_results(root) if is_experiment(root) else ExperimentResults(experiment.name, root)
    names = [run.name for run in experiment.runs]
    results.runs = {name: results.runs.get(name, []) for name in names}  # the experiment's runs, in its order
    have = {name: finished_seeds(jobs, record.seeds) for name, jobs in results.runs.items()}
    check_sequential(results)
    return sequential(results, declared, results.split() or ""), have


def until_decided(experiment: Experiment, options: runner.Options, console) -> runner.Summary:
    """Trains the seeds each look needs until every row is decided or has --max-seeds; the last pass's summary."""
    record = declare(experiment, options.results, options.seeds, options.margin, options.max_seeds)
    assert record is not None and record.max_seeds is not None
    d = design(record)
    rows = len(experiment.runs) - 1
    console.print(f"until decided: {d.describe()}; at most {(rows + 1) * (d.max_seeds - d.first)} seeds beyond the "
                  f"first {d.first} of each of {rows + 1} runs (design: {options.results / experiment.name / DESIGN})",
                  highlight=False)  # fmt: skip
    if record.margin is None:
        console.print("  no margin declared (margin: in the experiment, or --margin): no row can be called "
                      f"equivalent, so a row with no difference trains all {d.max_seeds} seeds",
                      highlight=False)  # fmt: skip
    summary: runner.Summary | None = None
    while True:
        replayed, have = state(experiment, options, record)
        if replayed.done:
            if summary is None:  # decided before this command: its table, nothing trained
                summary = runner.sweep(experiment, replace(options, seeds=_finished(record, have)), console)
            break
        wanted = replayed.wanted
        adding = {run: n for run, n in wanted.items() if n > have[run]}
        look = replayed.looks + 1
        more = sum(d.max_seeds - n for n in wanted.values()) if look < d.looks else 0  # the last look adds none
        seeds = _finished(record, have) | {run: record.seeds[:n] for run, n in wanted.items() if n > have[run]}
        judged = "every run's first seeds" if look == 1 else f"{len(wanted) - 1} of {rows} rows still undecided"
        console.print(f"until decided: look {look} of {d.looks} (α {d.alpha_at(look - 1):.4f}), {judged}: "
                      f"{'training' if adding else 'reading'} "
                      + (", ".join(f"{run} to {n} seeds" for run, n in adding.items()) or "the finished seeds")
                      + f"; at most {more} more seeds after this look", highlight=False)  # fmt: skip
        summary = runner.sweep(experiment, replace(options, seeds=seeds), console)
        results, *_ = summary
        stuck = any(r.status in (Status.FAILED, Status.INTERRUPTED, Status.RUNNING_ELSEWHERE) for r in results)
        if not results or stuck or state(experiment, options, record)[1] == have:
            break  # a failed or unfinished seed: runner._run says which; the same command goes on from here
    return summary


def _finished(record: DesignRecord, have: dict[str, int]) -> dict[str, list[int]]:
    return {run: record.seeds[:n] for run, n in have.items()}


def print_verdicts(experiment: Experiment, options: runner.Options, console) -> None:
    """Every row's verdict, the look and seeds that decided it, and the seeds the design trained against a fixed
    design of --max-seeds seeds a run."""
    from ablate.report.verdicts import verdict_note

    record = read_design(options.results / experiment.name)
    if record is None or record.max_seeds is None:
        return
    replayed, have = state(experiment, options, record)
    d = design(record)
    frame = pd.DataFrame(
        [
            {
                "run": run,
                "n": decision.seeds,
                "baseline n": decision.reference_seeds,
                "ΔBLEU": None if decision.interval is None else round(decision.interval.delta, 2),
                "ΔBLEU lo": None if decision.interval is None else round(decision.interval.low, 2),
                "ΔBLEU hi": None if decision.interval is None else round(decision.interval.high, 2),
                "verdict": decision.verdict,
                "decided at": f"look {decision.look + 1} of {d.looks}, α {decision.alpha:.4f}",
            }
            for run, decision in replayed.decisions.items()
        ],
        columns=["run", "n", "baseline n", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "verdict", "decided at"],
        dtype=object,
    )
    declared = Declared(d, record.seeds, f"declared in {options.results / experiment.name / DESIGN}")
    notes = [
        verdict_note(declared, len(experiment.runs) - 1, replayed),
        f"seeds: {sum(have.values())} used, against {d.max_seeds * len(experiment.runs)} for a fixed design of "
        f"{d.max_seeds} seeds a run.",
    ]
    print_table(console, f"{experiment.name}: verdicts ({d.describe()})", frame, notes)
