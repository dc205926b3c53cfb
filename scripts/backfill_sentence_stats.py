"""BLEU statistics for runs scored before the worker kept them: hypotheses/<split>.bleu.json beside every file of
hypotheses under the given experiments (each seed's end and its budget points), counted from the test references
as the worker counts them (ablate.bleu_statistics). A file that has statistics of its hypotheses already is left
as it is, so running it again, as seeds land, counts only the new ones.

    ABLATE_DATA_DIR=/path/to/corpora python scripts/backfill_sentence_stats.py results          # every experiment
    ABLATE_DATA_DIR=/path/to/corpora python scripts/backfill_sentence_stats.py results/table3   # one
    python scripts/backfill_sentence_stats.py results --check   # counts again and compares; writes nothing

A script, not an `ablate` command: it migrates the committed evidence once. Every run scored since keeps its
statistics from its worker, and a report of runs from before counts them from the references, as it always did.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from ablate.bleu_statistics import References, kept, read
from ablate.errors import UserError
from ablate.report.results import references
from ablate.rundir import (
    BUDGET_POINTS,
    HYPOTHESES,
    RUNS,
    is_experiment,
    read_config,
    run_dirs,
    seed_dirs,
    statistics_path,
)


def experiments(path: Path) -> list[Path]:
    """`path` when it is an experiment, else every experiment below it, at any depth (results/h200/pe)."""
    if is_experiment(path):
        return [path]
    if not path.is_dir():
        raise UserError(f"{path}: no such directory")
    return sorted(runs.parent for runs in path.rglob(RUNS) if runs.is_dir() and RUNS not in runs.parent.parts)


def scored(experiment: Path) -> Iterator[tuple[Path, Path, str]]:
    """(seed directory, directory of the hypotheses, split) for every file of hypotheses of the experiment."""
    for run in run_dirs(experiment):
        for seed in seed_dirs(run):
            points = sorted(p for p in (seed / BUDGET_POINTS).glob("*") if p.is_dir())
            for directory in (seed, *points):
                for path in sorted((directory / HYPOTHESES).glob("*.txt")):
                    yield seed, directory, path.stem


class Counter:
    """The References of each test set the runs read (their n-grams counted once), by what the run's config reads."""

    def __init__(self) -> None:
        self.sets: dict[str, References] = {}

    def of(self, config: dict, split: str) -> References:
        data, lowercase = config["data"], bool(config.get("evaluation", {}).get("lowercase", False))
        key = repr([data["corpus"], data.get("data_dir"), data["source"], data["target"], data.get("max_pairs"),
                    split, lowercase])  # fmt: skip
        if key not in self.sets:
            self.sets[key] = References(references(config, split), lowercase)
        return self.sets[key]


def backfill(experiment: Path, counter: Counter, check: bool) -> tuple[int, int, int, list[str]]:
    """(files written or checked, left as they were, bytes written, errors) for one experiment."""
    written = left = size = 0
    errors: list[str] = []
    for seed, directory, split in scored(experiment):
        try:
            config = read_config(seed)
            lowercase = bool(config.get("evaluation", {}).get("lowercase", False))
            if not check and kept(directory, split, lowercase)[0] is not None:
                left += 1
                continue
            against = counter.of(config, split)
            if check:
                have, counted = read(directory, split), against.of(directory, split)
                if have is None or counted is None or have.dump() != counted.dump():
                    why = "missing" if have is None else "differs from the statistics counted again"
                    errors.append(f"{statistics_path(directory, split)}: {why}")
                written += 1
                continue
            against.keep(directory, split)
        except (UserError, ValueError, OSError, KeyError) as error:
            errors.append(f"{directory / HYPOTHESES / split}.txt: {error}".splitlines()[0])
            continue
        written, size = written + 1, size + statistics_path(directory, split).stat().st_size
    return written, left, size, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a results directory, or experiments in it")
    parser.add_argument("--check", action="store_true", help="count again and compare with the kept; write nothing")
    args = parser.parse_args(argv)
    counter, failed = Counter(), False
    for path in args.paths:
        try:
            found = experiments(path)
        except UserError as error:
            print(error, file=sys.stderr)
            return 2
        for experiment in found:
            done, left, size, errors = backfill(experiment, counter, args.check)
            verb = "checked" if args.check else f"written ({size / 1e6:.2f} MB)"
            print(f"{experiment}: {done} {verb}, {left} had statistics of their hypotheses already")
            for error in errors:
                print(f"  {error}", file=sys.stderr)
            failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
