"""The package's wings import one way (docs/architecture.md): no cycle, and no wing imports one above it.

Every import counts, the strict way: at file level, inside a function, and under `TYPE_CHECKING`. The
imports are read from the source (ast), so a cycle that a function-local import hides at load time is
still found.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "ablate"

# The wings, lowest first. A module may import its own wing and the wings before it, never one after it.
WINGS = [
    ("foundation", ["ablate.errors", "ablate.files", "ablate.registry", "ablate.config", "ablate.rundir"]),
    ("parts", ["ablate.parts"]),
    ("data", ["ablate.data"]),
    ("model", ["ablate.model"]),
    ("train", ["ablate.train"]),
    ("report", ["ablate.report"]),
    ("sweep", ["ablate.sweep"]),
    ("check", ["ablate.check"]),
    ("entry points", ["ablate.cli", "ablate.worker", "ablate"]),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def wing(module: str) -> int:
    """The rank of the module's wing: the longest prefix among the wings' packages and modules."""
    best, rank = "", None
    for i, (_, prefixes) in enumerate(WINGS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, rank = prefix, i
    assert rank is not None, f"{module} belongs to no wing: add it to WINGS and to docs/architecture.md"
    return rank


def imports(module: str) -> set[str]:
    """The ablate modules `module` imports anywhere in its source (`from pkg import submodule` names the submodule)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports(module) for module in MODULES}


def test_every_module_has_a_wing():
    for module in MODULES:
        wing(module)


def test_no_wing_imports_one_above_it():
    against = [f"{m} ({WINGS[wing(m)][0]}) imports {d} ({WINGS[wing(d)][0]})"
               for m, deps in GRAPH.items() for d in sorted(deps) if wing(d) > wing(m)]  # fmt: skip
    assert not against, "\n".join(against)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, and modules that import themselves (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle_that_a_function_local_import_hides(tmp_path):
    """The check can fail: two modules whose only tie back is an import inside a function are one tangle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    names = {a.name for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.Import) for a in n.names}
    assert names == {"x", "y"}  # ast.walk sees both: neither hides from the test


@pytest.mark.parametrize("module", ["ablate.report.build", "ablate.report.results", "ablate.rundir"])
def test_the_report_wing_and_the_run_directory_do_not_import_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
