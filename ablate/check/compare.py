"""A re-run against its reference: rows of expected, measured and tolerance, in one of two modes. No torch.

- **exact**, on the CPU that made the reference (same device name, hence CPU model, ISA and threads,
  same torch, same precision), unless the reference says `mode: noise` or the check is run with `--noise`:
  a run is deterministic there, so the hypotheses' hash and every number must be equal;
- **within seed noise**, anywhere else, and where exact is not asked for: another CPU's round-off sends
  training down another path, as a new seed would. Each metric may move by `Tolerance.multiple`
  seed-to-seed standard deviations (or its floor): the Student t prediction interval of
  ablate.check.reference, which results/reference/README.md works through.

A measured seed is its run record (ablate.record.RunResult) with the check's losses and hash beside it
(ablate.check.reference.Measured).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from ablate.check.reference import NOISE_METRICS, Measured, Reference, SeedRun, metric, shared_steps
from ablate.record import RunResult

if TYPE_CHECKING:
    from rich.table import Table

Row = tuple[str, str, str, str, bool]  # metric, expected, measured, tolerance, within


def machine(result: RunResult) -> dict[str, str]:
    """Where a result ran, as a reference keeps it: device (CPU model, ISA, threads), torch, precision."""
    return {"device": str(result.device), "torch": str(result.torch), "precision": str(result.precision)}


def same_machine(ref: Reference, result: RunResult) -> bool:
    """Whether `result` ran where the reference was made: there a run is deterministic."""
    return ref.machine is not None and ref.machine == machine(result)


def exact_here(ref: Reference, result: RunResult, noise: bool) -> bool:
    """Whether `result` is judged exactly: a CPU reference re-run where it was made, unless `--noise` or the
    reference's own `mode: noise` asks otherwise."""
    exact = ref.device == "cpu" and ref.mode == "exact"  # GPU kernels are not bit-deterministic
    return exact and same_machine(ref, result) and not noise


def compare_exact(ref: Reference, measured: Measured) -> list[Row]:
    """Every number and the hypotheses' hash of the first seed, equal to the last digit kept."""
    exp = ref.expected
    run = exp.seeds[exp.first]
    got = measured.seed_run(exp.split)
    rows: list[Row] = [_exact("params", f"{exp.params:,}", _fmt(measured.result.params, "{:,}"))]
    rows.append(_exact(f"hypotheses {exp.split} (sha256)", run.hypotheses[:12],
                       got.hypotheses[:12] if got and got.hypotheses else "-"))  # fmt: skip
    rows.append(_exact(f"BLEU {exp.split}", f"{run.bleu:.2f}", _fmt(got and got.bleu, "{:.2f}")))
    rows.append(_exact(f"chrF {exp.split}", f"{run.chrf:.2f}", _fmt(got and got.chrf, "{:.2f}")))
    for step, value in run.valid_loss.items():
        rows.append(_exact(f"valid loss @ {step}", f"{value:.4f}", _fmt(got and got.valid_loss.get(step), "{:.4f}")))
    return rows


def compare_noise(ref: Reference, measured: Measured) -> list[Row]:
    """The first seed's metrics against the seeds' mean, each within k seed standard deviations (or its floor). The
    loss curves are compared over the steps that the seeds and the re-run all validated at (`shared_steps`: early
    stopping ends them at different steps), the row named with its last step where that is short of a seed's end;
    a re-run that validated at other steps has no curve to compare."""
    exp, tol = ref.expected, ref.tolerance
    runs = list(exp.seeds.values())
    k = tol.multiple(len(runs))
    got = measured.seed_run(exp.split)
    rows: list[Row] = [_exact("params", f"{exp.params:,}", _fmt(measured.result.params, "{:,}"))]
    curves = [run.valid_loss for run in runs]
    steps = shared_steps([*curves, got.valid_loss]) if got is not None else None
    steps = steps or shared_steps(curves) or []
    for name in NOISE_METRICS:
        values = [metric(run, name, steps) for run in runs]
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        allowed = max(k * sd, tol.floor.get(name, 0.0))
        fmt = "{:.4f}" if name.startswith("valid") else "{:.2f}"
        value = _value(got, name, steps)
        ok = value is not None and abs(value - mean) <= allowed + 1e-9
        if name == "valid loss curve" and any(max(curve) > steps[-1] for curve in curves):
            name = f"{name} to step {steps[-1]:,}"
        rows.append((name, f"{fmt.format(mean)} ± {fmt.format(sd)} sd", _fmt(value, fmt), f"± {fmt.format(allowed)}",
                     ok))  # fmt: skip
    return rows


def _value(got: SeedRun | None, name: str, steps: list[int]) -> float | None:
    """The re-run's metric; its loss curve over `steps` only where it validated at each of them."""
    if got is None or (name == "valid loss curve" and not all(step in got.valid_loss for step in steps)):
        return None
    return metric(got, name, steps)


def _exact(name: str, expected: str, measured: str) -> Row:
    return name, expected, measured, "exact", expected == measured


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def within(rows: list[Row]) -> bool:
    """Whether every row is within its tolerance: the reference passes."""
    return all(row[4] for row in rows)


def mode_line(ref: Reference, result: RunResult, exact: bool, noise: bool) -> str:
    """How and where the run is judged, for the table's title and the verdict."""
    made = (ref.machine or {}).get("device") or ref.environment.get("device", "?")
    if exact:
        return f"same machine ({made}): exact"
    k = ref.tolerance.multiple(len(ref.expected.seeds))
    if noise:
        why = "asked for"
    elif ref.device == "cuda" and same_machine(ref, result):
        why = "same GPU, whose kernels are not bit-deterministic"
    elif ref.mode == "noise" and same_machine(ref, result):
        why = "same machine, the reference's mode"
    else:
        why = "other machine"
    return (f"{why} ({machine(result)['device']}; made on {made}): within seed noise, {k:.2f} sd of "
            f"{len(ref.expected.seeds)} seeds")  # fmt: skip


def table(title: str, rows: list[Row]) -> Table:
    """The rows as a rich table: metric, expected, measured, tolerance, and ok or OUTSIDE."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for column in ("metric", "expected", "measured", "tolerance", ""):
        out.add_column(column, justify="left" if column == "metric" else "right")
    for name, expected, got, tolerance, ok in rows:
        out.add_row(name, expected, got, tolerance, "ok" if ok else "OUTSIDE")
    return out


def arithmetic_changed(ref: Reference, measured: Measured) -> str:
    """Why an exact check failed on the machine that made the reference, and whether seed noise would cover it."""
    noise = within(compare_noise(ref, measured))
    return (
        f"  not identical on the machine that made {ref.name}: the code changed its arithmetic "
        f"({'still within' if noise else 'and beyond'} seed noise; --noise judges that way)"
    )


def verdict(ref: Reference, passed: bool, mode: str) -> str:
    return f"verdict: {ref.name}: {'passed' if passed else 'FAILED'} ({mode})"
