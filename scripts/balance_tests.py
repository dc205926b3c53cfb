"""Which test files go first under `pytest -n 2 --dist loadfile`: tests/conftest.py's SLOWEST_FILES, from a log.

    ABLATE_DATA_DIR=... PYTEST_ADDOPTS="--durations=0" .venv/bin/python -m pytest -n 2 | tee /tmp/tests.log
    python scripts/balance_tests.py /tmp/tests.log

reads every test's setup, call and teardown seconds from `--durations=0` (a module fixture's setup counts
towards its file's first test), sums them by file, and replays pytest-xdist's loadfile scheduler (3.8: a file
at a time to each worker, then one more to a worker whenever it has 2 tests or fewer left) on those seconds,
for the order conftest gives now and for the files longest first. It prints each order's finish time on each
worker, and the SLOWEST_FILES list to paste. A replay is a model, not a measurement: the seconds are those of
one run on one machine, and a test that trains beside the other worker's runs is slower than it would be alone.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(\d+\.\d+)s\s+(setup|call|teardown)\s+(tests/\S+?\.py)::(\S+)")


def durations(log: Path) -> dict[str, dict[str, float]]:
    """{file: {test: seconds}} from a pytest --durations=0 report."""
    tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in log.read_text(errors="replace").splitlines():
        if match := LINE.match(line.strip()):
            seconds, _, path, test = match.groups()
            tests[Path(path).name][test] += float(seconds)
    return tests


def current_order() -> list[str]:
    """conftest's SLOWEST_FILES, read from its source: importing conftest would import torch and pytest."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    assigned = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                    and any(getattr(t, "id", None) == "SLOWEST_FILES" for t in node.targets))  # fmt: skip
    return list(ast.literal_eval(assigned))


def collection_order(first: list[str], files: list[str]) -> list[str]:
    """conftest's sort: the listed files first, in their order, then the rest as collected (by name)."""
    listed = [f for f in first if f in files]
    return listed + sorted(f for f in files if f not in listed)


def replay(order: list[str], tests: dict[str, dict[str, float]], workers: int = 2) -> list[tuple[float, list[str]]]:
    """Each worker's finish time and files under xdist's LoadScopeScheduling with --no-loadscope-reorder."""
    queue = [(f, list(tests[f].values()) or [0.0]) for f in order]
    pending: list[list[float]] = [[] for _ in range(workers)]
    clock = [0.0] * workers
    files: list[list[str]] = [[] for _ in range(workers)]

    def assign(w: int) -> None:
        name, seconds = queue.pop(0)
        files[w].append(name)
        pending[w].extend(seconds)

    for w in range(workers):
        if queue:
            assign(w)
    for w in range(workers):
        if queue and len(pending[w]) <= 2:
            assign(w)
    while any(pending):
        w = min((w for w in range(workers) if pending[w]), key=lambda w: clock[w] + pending[w][0])
        clock[w] += pending[w].pop(0)
        if queue and len(pending[w]) <= 2:
            assign(w)
    return list(zip(clock, files, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the output of pytest -n 2 with --durations=0")
    parser.add_argument("--top", type=int, default=14, help="how many files to list (default 14)")
    args = parser.parse_args()
    tests = durations(args.log)
    if not tests:
        sys.exit(f"{args.log}: no --durations lines (run pytest with --durations=0)")
    total = {f: sum(t.values()) for f, t in tests.items()}
    longest = sorted(total, key=total.get, reverse=True)
    print(f"{len(total)} files, {sum(total.values()):,.0f} s of tests in all")
    for name, order in (("now", collection_order(current_order(), list(total))), ("longest first", longest)):
        finished = replay(order, tests)
        print(f"{name}: " + ", ".join(f"worker {w} ends at {c:,.0f} s ({len(f)} files)"
                                      for w, (c, f) in enumerate(finished)))  # fmt: skip
    print("SLOWEST_FILES = [" + ", ".join(f'"{f}"' for f in longest[: args.top]) + "]")
    for f in longest[: args.top]:
        print(f"  {f}: {total[f]:,.0f} s")


if __name__ == "__main__":
    main()
