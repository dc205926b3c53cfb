"""`ablate check [REFERENCE...]`: re-runs a reference baseline and compares it with the numbers kept in git.

Each measured reference under results/reference/ (ablate.check.reference) trains its first seed again
through the sweep (ablate.check.measure) and is judged exactly on the machine that made it, within seed
noise anywhere else or where the reference or `--noise` asks for it (ablate.check.compare); the exit code
is 1 when any fails. `--update` measures every seed of a reference again, from its source experiment file,
and rewrites the file: on purpose only.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

from ablate.check.compare import (
    arithmetic_changed,
    compare_exact,
    compare_noise,
    exact_here,
    machine,
    mode_line,
    table,
    verdict,
    within,
)
from ablate.check.measure import (
    can_measure,
    environment,
    expected_from,
    finished_seeds,
    measure,
    resolve_source,
    source_changed,
)
from ablate.check.reference import Measured, Reference, dump, find, load
from ablate.errors import UserError
from ablate.files import write_text
from ablate.record import Status, resolved_precision


def check(path: Path, update: bool, keep: Path | None, named: bool, out, threads: int | None = None,
          noise: bool = False, from_results: Path | None = None) -> bool:  # fmt: skip
    """Re-runs one reference and prints expected against measured (or rewrites it); False when it fails.

    `threads`: train with this many CPU threads instead of the reference's (a run that differs as another
    CPU's would); `noise`: judge within seed noise even on the machine that made the reference;
    `from_results`: with `update`, read the seeds that finished there (same spec and seed) instead of training
    them again."""
    ref = load(path)
    if ref.status != "measured" and not update:
        out.print(f"{path}: {ref.name}: not yet measured; to measure it: ablate check --update {path}", highlight=False)
        return not named  # asked for by name, it cannot pass
    if not can_measure(ref):
        out.print(f"{path}: {ref.name}: made on a GPU and none is visible here; skipped", highlight=False)
        return not named
    if update:
        spec, plugins = resolve_source(ref)
        seeds = list(range(1, ref.seeds + 1))
    else:
        spec, plugins = ref.spec, ref.plugins
        seeds = [ref.expected.first]
        _note_changed_source(ref, out)
    what = f"{len(seeds)} seeds of " if len(seeds) > 1 else ""
    out.print(f"{path}: {'measuring' if update else 're-running'} {what}{ref.name} ({ref.description})",
              highlight=False)  # fmt: skip
    measured = finished_seeds(ref, spec, plugins, seeds, from_results, out) if update and from_results else {}
    for seed, m in measured.items():
        out.print(f"  seed {seed}: read from {m.run} (finished, the same spec and seed)", highlight=False)
    if from_results is not None and len(measured) < len(seeds):
        out.print(f"  {from_results}: no finished run of seed(s) "
                  f"{', '.join(str(s) for s in seeds if s not in measured)}: they train", highlight=False)  # fmt: skip
    with contextlib.ExitStack() as stack:
        work = keep if keep is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ablate-")))
        train = [seed for seed in seeds if seed not in measured]
        if train:
            measured |= measure(ref, spec, plugins, train, threads or ref.threads, work, out)
    measured = dict(sorted(measured.items()))
    for seed, m in measured.items():
        if m.result.status != Status.COMPLETED:
            out.print(f"{ref.name}: seed {seed}: the run {m.result.status}: {m.result.error or ''}", highlight=False)
            return False
    if update:
        return _update(path, ref, spec, plugins, measured, out)
    return _compare(ref, measured[seeds[0]], seeds[0], noise, out)


def _note_changed_source(ref: Reference, out) -> None:
    """Says so when the source experiment file no longer resolves to the spec the reference keeps and checks."""
    with contextlib.suppress(UserError):
        if source_changed(ref):
            out.print(f"  note: {ref.source} now resolves to a different spec than this reference keeps; "
                      "the reference's own spec is checked", highlight=False)  # fmt: skip


def _update(path: Path, ref: Reference, spec: dict[str, Any], plugins: list[str],
            measured: dict[int, Measured], out) -> bool:  # fmt: skip
    """`--update`: rewrites the reference file with what its seeds measured, and the spec and machine they had."""
    seeds = list(measured)
    first = measured[seeds[0]].result
    # a reference pins what it measured, as it pins threads
    spec["training"]["precision"] = resolved_precision(spec["training"]["precision"], first.precision)
    updated = ref.model_copy(update={"status": "measured", "spec": spec, "plugins": plugins,
                                     "machine": machine(first), "expected": expected_from(measured, spec),
                                     "environment": environment(measured[seeds[0]])})  # fmt: skip
    if ref.mode == "exact" and len({m.result.device for m in measured.values()}) > 1:
        out.print(
            f"  note: the seeds trained on several devices (each seed says which); seed {seeds[0]} is checked "
            "exactly where it trained, and `mode: noise` would judge it within their noise",
            highlight=False,
        )
    write_text(path, dump(updated))
    out.print(f"{path}: rewritten with the measured values of seeds {', '.join(map(str, seeds))}", highlight=False)
    return True


def _compare(ref: Reference, measured: Measured, seed: int, noise: bool, out) -> bool:
    """Prints the first seed's result against the reference, exactly or within seed noise, and the verdict."""
    exact = exact_here(ref, measured.result, noise)
    rows = compare_exact(ref, measured) if exact else compare_noise(ref, measured)
    mode = mode_line(ref, measured.result, exact, noise)
    out.print(table(f"{ref.name}, seed {seed}: {mode}", rows))
    passed = within(rows)
    if exact and not passed:
        out.print(arithmetic_changed(ref, measured), highlight=False)
    out.print(verdict(ref, passed, mode), highlight=False)
    return passed


def list_references(names: list[str], out) -> int:
    """`ablate check --list`: each reference, its status and mode, and what checking it cost where it was made, at
    most the console's width (the least needed columns left out, and named, before a cell would wrap)."""
    from ablate.terminal import fit, say

    columns = ["reference", "status", "mode", "source", "a check retrains", "measured on", "it took there"]
    rows = []
    for path in find(names):
        ref = load(path)
        wall = ref.environment.get("wall_seconds")
        took = f"{wall / 60:.0f} min" if isinstance(wall, int | float) else "-"
        where = (ref.machine or {}).get("device", "-")
        threads = f", {ref.threads} thread{'s' if ref.threads != 1 else ''}" if ref.threads else ""
        retrains = f"seed {ref.expected.first}{threads}" if ref.expected is not None else "-"
        rows.append([path.stem, ref.status, ref.mode, ref.source, retrains, where, took])
    table, dropped = fit(columns, rows, out.width, priority=["reference", "status", "mode", "it took there",
                                                             "a check retrains", "measured on", "source"],
                         keep=2, wraps=["measured on", "source", "status"])  # fmt: skip
    say(out, "References (results/reference/)")
    out.print(table)
    if dropped:
        say(out, f"Not shown at {out.width} columns: {', '.join(dropped)}.")
    say(out, "A bare `ablate check` checks every measured reference; name some to check fewer. A check takes about "
        "as long as its seed took where it was measured, longer on a slower CPU.")  # fmt: skip
    return 0


def check_all(names: list[str], update: bool, keep: Path | None, out, threads: int | None = None,
              noise: bool = False, from_results: Path | None = None) -> int:  # fmt: skip
    """`ablate check`: each named reference (default: every measured one); the exit code, 1 when any failed."""
    if from_results is not None and not update:
        raise UserError("--from-results: only with --update (a check re-runs its seed; --update may read them)")
    if from_results is not None and not from_results.is_dir():
        raise UserError(f"--from-results {from_results}: no such directory")
    failed = [str(path) for path in find(names)
              if not check(path, update, keep, bool(names), out, threads, noise, from_results)]  # fmt: skip
    if failed:
        print(f"check failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
