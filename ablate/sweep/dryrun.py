"""`ablate run --dry-run`: the run without training. The same design checks and exit codes as the run (design.json
read and checked, never written), every planned job, the design it would be judged by, the most runs it could
train and what they would cost on this machine, from the runs this machine has finished.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ablate.record import DesignRecord, RunResult
from ablate.report.verdicts import design
from ablate.rundir import DESIGN, Exit, read_design, read_metrics, read_result, run_directories
from ablate.sweep.design import declare
from ablate.sweep.experiment import Experiment
from ablate.sweep.plan import DRY_RUN_COLUMNS, Planned, dry_run_rows, plan


def dry_run(experiments: list[Experiment], options, console) -> int:
    """Every design checked as `ablate run` checks it (a bad one is the run's one-line error, exit 2), then each
    experiment's planned jobs, its design, the worst case and its cost here."""
    from rich.table import Table

    records = [declare(e, options.results, options.seeds, options.margin, options.max_seeds, write=False)
               for e in experiments]  # fmt: skip
    for experiment, record in zip(experiments, records, strict=True):
        planned = plan(experiment, options.results, options.seeds, options.fresh, options.only)
        table = Table(title=f"{experiment.path}: {experiment.name}, {len(planned)} job(s), nothing trained "
                      "(--dry-run)", title_justify="left")  # fmt: skip
        for column in DRY_RUN_COLUMNS:
            table.add_column(column, justify="right" if column in ("params", "seed", "steps") else "left")
        for row in dry_run_rows(experiment, planned):
            table.add_row(*row)
        console.print(table)
        console.print("  params at the nominal vocabulary size (tokenizer.vocab_size, or merges + 4 specials)",
                      highlight=False)  # fmt: skip
        for line in design_lines(experiment, options.results, record, planned):
            console.print(f"  {line}", highlight=False)
        if record is not None and record.max_seeds is not None:
            console.print(f"  {next_look(experiment, options, record)}", highlight=False)
    return Exit.COMPLETED


def design_lines(experiment: Experiment, results: Path, record: DesignRecord | None,
                 planned: list[Planned]) -> list[str]:  # fmt: skip
    """The design the rows would be judged by, where its margin is declared, the worst case and its cost here."""
    root = results / experiment.name
    existing = read_design(root)
    if record is None:
        said = "design: no margin (no row can be called equivalent), α 0.05, one look at the seeds trained"
    else:
        on_disk = existing is not None and existing.margin == record.margin
        where = (f"declared in {root / DESIGN}" + (f" at {existing.declared_at}" if existing.declared_at else "")
                 if on_disk else f"declared by this run in {root / DESIGN}")  # fmt: skip
        said = f"design: {design(record).describe()}; the margin {where}"
        if record.seed_sd is not None:
            said += f"; one-seed arms borrow seed sd {record.seed_sd:g} ({record.seed_sd_from})"
    runs = list(dict.fromkeys(p.job.run for p in planned))
    sequential = record is not None and record.max_seeds is not None
    if sequential:
        worst = len(runs) * record.max_seeds
        first = len(runs) * record.first
        case = (f"at most {worst} runs ({len(runs)} runs x {record.max_seeds} seeds), at least {first} (the first "
                f"{record.first} seeds each)")  # fmt: skip
    else:
        worst = len(planned)
        case = f"{worst} runs ({len(runs)} runs x their seeds)"
    to_train = [p for p in planned if p.trains]
    if sequential:  # the looks decide what trains: price the worst case, each run at its measured time here
        finished = len(planned) - len(to_train)
        cost = Cost.of(runs, experiment.name, results)
        left = worst - finished
        each = cost.seconds / len(runs) if runs else 0.0
        return [said, f"worst case: {case}", f"cost: {cost.say(each * left, f'the worst case has {left} runs left')}"]
    cost = Cost.of([p.job.run for p in to_train], experiment.name, results)
    said_cost = "nothing to train now" if not to_train else cost.say(cost.seconds, f"{len(to_train)} to train now")
    return [said, f"worst case: {case}; {len(to_train)} to train now", f"cost: {said_cost}"]


@dataclass(frozen=True)
class Cost:
    """What the planned runs would take, from finished runs of the same experiment: this machine's where it has
    some, else the committed ones' (results/ beside the command) and the machines they ran on. Where this machine
    finished only some runs, the others are priced at their times on the machine that finished most of them,
    scaled by what the runs both finished took here and there."""

    seconds: float  # the jobs' run time, each at its run's median typical wall time (else the median of every run)
    measured: int  # finished jobs read
    machines: list[str]  # where they ran, when not on this machine
    results: Path
    scaled: str = ""  # the machine whose times, scaled, priced runs this machine has not finished

    @classmethod
    def of(cls, runs: list[str], experiment: str, results: Path) -> Cost:
        here = _this_machine()
        places = list(dict.fromkeys([results.resolve(), Path("results").resolve()]))
        found = [f for place in places for f in _finished(place, experiment)]
        mine = [(r, d) for r, d in found if here and (r.device or "").startswith(here)]
        gpu = _this_machine_has_gpu()  # else the machine of the same kind (CPU or GPU) that finished the most
        kind = [(r, d) for r, d in found if bool(r.gpus) == gpu and (r, d) not in mine] or (found if not mine else [])
        most = Counter(_machine(r) for r, _ in kind).most_common(1)
        other = _walls([(r, d) for r, d in kind if most and _machine(r) == most[0][0]])
        walls = _walls(mine) or other
        if not walls:
            return cls(0.0, 0, [], results)
        median = {run: statistics.median(w) for run, w in walls.items()}
        every = statistics.median(w for v in walls.values() for w in v)
        both = [run for run in median if mine and run in other]
        scale = statistics.median(median[run] / statistics.median(other[run]) for run in both) if both else None
        scaled = [run for run in runs if run not in median and scale and run in other]
        seconds = sum(median[run] if run in median else statistics.median(other[run]) * scale if run in scaled
                      else every for run in runs)  # fmt: skip
        machines = [] if mine else [most[0][0]]
        return cls(seconds, sum(map(len, walls.values())), machines, results, most[0][0] if scaled else "")

    def say(self, seconds: float, what: str) -> str:
        """`what: about N run-hours, from ...`: `seconds` of run time priced from this cost's runs."""
        if not self.measured:
            return (f"no measurement: no run of this experiment has finished under {self.results} or in ./results, "
                    "on this machine or another")  # fmt: skip
        runs = f"{self.measured} finished run{'s' if self.measured != 1 else ''}"
        where = (f"from {runs} of this experiment on this machine (the same CPU model, ISA "
                 "and bf16, or GPU), one run at a time, slowed steps at their median" if not self.machines else
                 f"from {runs} of this experiment on {', '.join(self.machines)}, not this "
                 "machine (none has finished here): expect another figure here")  # fmt: skip
        if self.scaled:
            where += (f"; runs not finished here at their times on {self.scaled}, scaled by the runs finished on "
                      "both")  # fmt: skip
        return f"{what}: about {run_time(seconds)}, {where}"


def _walls(finished: list[tuple[RunResult, Path]]) -> dict[str, list[float]]:
    """Each run's typical wall times, a seed each."""
    walls: dict[str, list[float]] = {}
    for r, directory in finished:
        walls.setdefault(r.run, []).append(typical_wall(r, directory))
    return walls


def run_time(seconds: float) -> str:
    """Run time as people read it: run-hours, or run-minutes under two hours (never `0.0 run-hours`)."""
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} run-hours"
    return f"{max(1, round(seconds / 60))} run-minute{'s' if round(seconds / 60) > 1 else ''}"


def _machine(result) -> str:
    """The machine a run's result.json names, without its thread count."""
    device = result.device or "an unknown device"
    return device.rsplit(", ", 1)[0] if device.endswith(("thread", "threads")) else device


def _this_machine_has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def typical_wall(result: RunResult, directory: Path) -> float:
    """A finished run's wall time with every training step slower than twice the median counted at the median: what
    it costs on a machine left to it. A run slowed for hours by other work beside it (a test suite, a stopped and
    resumed sweep: pauses fall inside a step) would otherwise price every run left at its worst hours."""
    steps = [float(m["step_ms"]) for m in read_metrics(directory) if m.get("step_ms") is not None]
    wall = float(result.wall_seconds)
    if not steps or not result.train_seconds:
        return wall
    median = statistics.median(steps)
    typical = statistics.fmean(ms if ms <= 2 * median else median for ms in steps)
    return wall - result.train_seconds * (1 - typical / statistics.fmean(steps))


def _finished(results: Path, experiment: str) -> list[tuple[RunResult, Path]]:
    """Finished, trained (not copied) runs of `experiment` under `results`, with their directories."""
    out = []
    for directory in run_directories(results):
        if directory.parents[2].name != experiment:
            continue
        result = read_result(directory)
        if result is not None and result.finished and not result.reused_from and result.wall_seconds is not None:
            out.append((result, directory))
    return out


def next_look(experiment: Experiment, options, record: DesignRecord) -> str:
    """Where a sequential design stands, replayed from the result files, and the seeds its next look trains."""
    from ablate.sweep.sequential import state

    replayed, have = state(experiment, options, record)
    if replayed.done:
        return f"sequential: decided after {replayed.looks} look(s); nothing more to train"
    adding = {run: n for run, n in replayed.wanted.items() if n > have.get(run, 0)}
    trains = ", ".join(f"{run} to {n} seeds" for run, n in adding.items()) or "nothing (reads the finished seeds)"
    return f"sequential: {replayed.looks} look(s) taken; look {replayed.looks + 1} trains {trains}"


def _this_machine() -> str:
    """This machine's device name as result.json's `device` starts: the first GPU's, or the CPU's model, ISA and
    bf16 without the thread count (`AMD EPYC (AVX2, emulated bf16)`)."""
    import torch

    from ablate.train.device import device_name

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return device_name(torch.device("cpu")).rsplit(", ", 1)[0]
