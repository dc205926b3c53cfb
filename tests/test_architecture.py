"""The package's wings import one way, as the table in docs/architecture.md says: that table is the one source.

The test parses the table from the doc (which modules make each wing, which wings and single modules each
may import, which may never reach torch) and holds no copy of it. Against it, it checks the imports that it
reads from every module's source (ast), the strict way: at file level, inside a function, and under
`TYPE_CHECKING`, so a cycle or an edge that a function-local import hides at load time is still found.

- every module belongs to exactly one wing (a listed module that does not exist yet is no error);
- every edge between two wings is one the table allows, and every allowance is one an edge uses;
- the table itself runs one way (no wing may import a wing after it), and allows nothing the architecture
  forbids (FORBIDDEN: report imports no part, model or trainer, of the data only its corpus; data no part);
- no import cycle (Tarjan);
- no module of a torch-free wing reaches, through any chain of imports, a module that imports torch.

The rules are functions of a graph and a table, and each is shown to fail on a planted bad graph.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "ablate"
DOC = ROOT / "docs" / "architecture.md"


@dataclasses.dataclass(frozen=True)
class Wing:
    """One row of the doc's table, its paths as module names: "ablate.parts." (a trailing dot) is the whole package."""

    name: str
    members: tuple[str, ...]
    wings: frozenset[str]  # the wings it may import
    modules: frozenset[str]  # single modules of other wings it may import
    torch_free: bool
    torch_exceptions: frozenset[str]  # never: its modules that may reach torch all the same; yes: those that never may

    def holds(self, module: str) -> bool:
        return any(module == m or (m.endswith(".") and (module + ".").startswith(m)) for m in self.members)


def path_module(path: str) -> str:
    """A path under ablate/ as a module name: `files.py` is ablate.files, `data/` ablate.data. (the whole package)."""
    if path.endswith("/"):
        return "ablate." + path.strip("/").replace("/", ".") + "."
    assert path.endswith(".py"), f"docs/architecture.md: `{path}` is neither a module (.py) nor a folder (/)"
    return ".".join(["ablate", *path.removesuffix(".py").split("/")]).removesuffix(".__init__")


def _outside_parentheses(text: str) -> str:
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    return text


def _paths(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_table(doc: str) -> list[Wing]:
    """The wings, lowest first, from the markdown table whose header names `wing`, `modules`, `imports` and `torch`."""
    lines = doc.splitlines()
    header = next(i for i, line in enumerate(lines)
                  if line.startswith("|") and {"wing", "modules", "imports", "torch"} <= set(_cells(line)))  # fmt: skip
    column = {name: _cells(lines[header]).index(name) for name in ("wing", "modules", "imports", "torch")}
    body = []
    for line in lines[header + 2 :]:  # past the header and its |---| line
        if not line.startswith("|"):
            break
        body.append(_cells(line))
    names = {row[column["wing"]] for row in body}
    table = []
    for row in body:
        name, where = row[column["wing"]], f"docs/architecture.md: {row[column['wing']]}"
        wings, modules = set(), set()
        for piece in re.split(r"[,;]", _outside_parentheses(row[column["imports"]])):
            piece = piece.strip().removeprefix("and ").removesuffix(" alone").strip()
            if re.fullmatch(r"`[^`]+`", piece):
                modules.add(path_module(piece.strip("`")))
            elif piece in names:
                wings.add(piece)
            else:
                assert piece in ("", "—"), f"{where}: imports: '{piece}' is no wing of the table and no `path`"
        torch = _outside_parentheses(row[column["torch"]])
        assert torch.startswith(("never", "yes")), f"{where}: torch: say 'never' or 'yes', not '{torch}'"
        table.append(Wing(name, tuple(path_module(p) for p in _paths(row[column["modules"]])), frozenset(wings),
                          frozenset(modules), torch.startswith("never"),
                          frozenset(path_module(p) for p in _paths(torch))))  # fmt: skip
    return table


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, package: str, known: Iterable[str]) -> set[str]:
    """Every module a source imports anywhere in it, absolute; `from pkg import name` names pkg.name when that is known.

    `package` is the package relative imports start from (the module itself for an __init__.py)."""
    known = set(known)
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        elif (name := dynamic_import(node)) is not None and name:
            found.add(name)  # importlib.import_module("ablate.model") is an edge like any other
    return found


DYNAMIC = ("import_module", "__import__")
DYNAMIC_ANYWHERE = {"ablate", "ablate.registry"}  # the lazy public names and the plugin loader import by a variable


def dynamic_import(node: ast.AST) -> str | None:
    """What an `importlib.import_module(...)` or `__import__(...)` call imports: the module name when it is a
    string literal, "" when it is computed; None for any other node."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in DYNAMIC:
        return None
    first = node.args[0] if node.args else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""


def computed_imports(source: str) -> int:
    """How many imports by a computed name a source makes (importlib.import_module(variable), __import__(variable))."""
    return sum(dynamic_import(node) == "" for node in ast.walk(ast.parse(source)))


def imports_torch(names: Iterable[str]) -> bool:
    return any(name == "torch" or name.startswith("torch.") for name in names)


TABLE = read_table(DOC.read_text(encoding="utf-8"))
MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
_IMPORTS = {m: imports(p.read_text(encoding="utf-8"), m if p.name == "__init__.py" else m.rpartition(".")[0], MODULES)
            for m, p in MODULES.items()}  # fmt: skip
GRAPH = {m: {n for n in names if n in MODULES and n != m} for m, names in _IMPORTS.items()}
TORCH = {m for m, names in _IMPORTS.items() if imports_torch(names)}  # the modules that import torch themselves


def wings_of(module: str, table: list[Wing]) -> list[Wing]:
    return [w for w in table if w.holds(module)]


def violations(graph: Mapping[str, set[str]], table: list[Wing]) -> list[str]:
    """A module in no wing or in two, and every edge between two wings that the table does not allow."""
    found = []
    for module in sorted(graph):
        if not (held := wings_of(module, table)):
            found.append(f"{module} belongs to no wing: add it to the table in docs/architecture.md")
        elif len(held) > 1:
            found.append(f"{module} belongs to {len(held)} wings ({', '.join(w.name for w in held)}): keep it in one")
    single = {m: ws[0] for m in graph if len(ws := wings_of(m, table)) == 1}
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if module not in single or dep not in single or single[module] == single[dep]:
                continue
            mine, theirs = single[module], single[dep]
            if theirs.name not in mine.wings and dep not in mine.modules:
                found.append(f"{module} ({mine.name}) imports {dep} ({theirs.name}): docs/architecture.md does not "
                             f"let {mine.name} import {theirs.name}")  # fmt: skip
    return found


def unused(graph: Mapping[str, set[str]], table: list[Wing]) -> list[str]:
    """Every allowance of the table that no edge uses: the table says more than the code does."""
    used = {(w.name, x.name) for m, deps in graph.items() for d in deps
            for w in wings_of(m, table) for x in wings_of(d, table)}  # fmt: skip
    used_modules = {(w.name, d) for m, deps in graph.items() for d in deps for w in wings_of(m, table)}
    stale = [(w.name, other) for w in table for other in sorted(w.wings) if (w.name, other) not in used]
    stale += [(w.name, module) for w in table for module in sorted(w.modules) if (w.name, module) not in used_modules]
    return [f"docs/architecture.md lets {name} import {other}, but no {name} module does: take it out of the table"
            for name, other in stale]  # fmt: skip


def out_of_order(table: list[Wing]) -> list[str]:
    """Every allowance in the table to import a wing (or a module of one) that is not before the wing."""
    rank = {w.name: i for i, w in enumerate(table)}
    found = [f"docs/architecture.md lets {w.name} import {other}, which is not before it"
             for w in table for other in sorted(w.wings) if rank[other] >= rank[w.name]]  # fmt: skip
    for w in table:
        for module in sorted(w.modules):
            held = wings_of(module, table)
            if not held or rank[held[0].name] >= rank[w.name]:
                found.append(f"docs/architecture.md lets {w.name} import {module}, which is not in a wing before it")
    return found


# What the architecture forbids, whatever the table says: the report reads run directories and knows nothing of
# how they were made (of the data, only the corpus registry, for the test references); the data knows no part.
FORBIDDEN = {"report": {"parts", "model", "train"}, "data": {"parts"}}
ONLY_MODULES = {"report": {"ablate.data.corpus"}}


def forbidden(table: list[Wing]) -> list[str]:
    """Every allowance in the table that the architecture forbids: the table cannot be widened to let them pass."""
    found = [f"docs/architecture.md lets {w.name} import {other}, which the architecture forbids"
             for w in table for other in sorted(w.wings & FORBIDDEN.get(w.name, set()))]  # fmt: skip
    found += [f"docs/architecture.md lets {w.name} import {module}, which the architecture forbids: of that wing only "
              f"{', '.join(sorted(ONLY_MODULES[w.name]))}" for w in table if w.name in ONLY_MODULES
              for module in sorted(w.modules - ONLY_MODULES[w.name])]  # fmt: skip
    return found


def torch_free(modules: Iterable[str], table: list[Wing]) -> list[str]:
    """The modules that must never reach torch: those of a torch-free wing but its named exceptions, and those a
    wing that uses torch names as never reaching it (`yes, but never `model/spec.py``)."""
    return sorted(m for m in modules for w in wings_of(m, table) if w.torch_free != (m in w.torch_exceptions))


def torch_chain(graph: Mapping[str, set[str]], torch: set[str], start: str) -> list[str] | None:
    """The shortest chain of imports from `start` to a module that imports torch, or None (breadth first)."""
    before: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        if module in torch:
            chain = [module]
            while (previous := before[chain[-1]]) is not None:
                chain.append(previous)
            return chain[::-1]
        for dep in sorted(graph.get(module, ())):
            if dep not in before:
                before[dep] = module
                queue.append(dep)
    return None


def torch_reach(graph: Mapping[str, set[str]], torch: set[str], table: list[Wing]) -> list[str]:
    """Every torch-free module that reaches torch, with the chain of imports that does."""
    found = []
    for module in torch_free(graph, table):
        if chain := torch_chain(graph, torch, module):
            found.append(f"{module} must not reach torch, but does: {' -> '.join(chain)} (imports torch)")
    return found


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
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


# The rules, on the code as it is.


def test_every_module_is_in_one_wing_and_every_edge_is_one_the_table_allows():
    found = violations(GRAPH, TABLE)
    assert not found, "\n".join(found)


def test_the_table_allows_no_more_than_the_code_does():
    found = unused(GRAPH, TABLE)
    assert not found, "\n".join(found)


def test_the_table_runs_one_way():
    found = out_of_order(TABLE)
    assert not found, "\n".join(found)


def test_the_table_allows_nothing_the_architecture_forbids():
    found = forbidden(TABLE)
    assert not found, "\n".join(found)


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_no_torch_free_module_reaches_torch_through_any_import():
    found = torch_reach(GRAPH, TORCH, TABLE)
    assert not found, "\n".join(found)


def test_the_torch_free_modules_import_no_torch_in_a_fresh_interpreter():
    """The same at run time, in import order: report.build, the foundation, check's torch-free modules."""
    modules = ["ablate.report.build", *(m for m in torch_free(MODULES, TABLE) if m != "ablate.report.build")]
    code = ("import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
            "    assert 'torch' not in sys.modules, f'importing {m} imported torch'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, *modules], check=True, cwd=ROOT)


def test_the_table_is_read_as_the_doc_says():
    """A check that the parser reads what a reader of the doc reads (the rows above stay honest)."""
    by_name = {w.name: w for w in TABLE}
    assert TABLE[0].name == "foundation" and TABLE[-1].name == "entry points"
    assert "ablate.record" in by_name["foundation"].members and by_name["foundation"].wings == set()
    assert by_name["entry points"].members == ("ablate.cli", "ablate.worker", "ablate")
    assert by_name["report"].modules == {"ablate.data.corpus"} and "data" not in by_name["report"].wings
    assert by_name["check"].torch_exceptions == {"ablate.check.measure", "ablate.check.run"}
    assert not by_name["model"].torch_free and by_name["model"].torch_exceptions == {"ablate.model.spec"}
    specs = {"ablate.data.spec", "ablate.model.spec", "ablate.train.spec", "ablate.parts.declared", "ablate.parts"}
    assert specs <= set(torch_free(MODULES, TABLE)) and "ablate.model.transformer" not in torch_free(MODULES, TABLE)


# Each rule fails on a planted bad graph, with its own message.


def planted(found: list[str], baseline: list[str]) -> list[str]:
    """What a plant adds to what the rule finds in the code as it is: each planted test holds whatever the code does."""
    return [f for f in found if f not in baseline]


def test_a_module_in_no_wing_fails():
    base = {m: deps - {"ablate.utils"} for m, deps in GRAPH.items() if m != "ablate.utils"}
    graph = {**base, "ablate.utils": set(), "ablate.cli": base["ablate.cli"] | {"ablate.utils"}}
    assert planted(violations(graph, TABLE), violations(base, TABLE)) == [
        "ablate.utils belongs to no wing: add it to the table in docs/architecture.md"
    ]


def test_a_module_in_two_wings_fails():
    table = [dataclasses.replace(TABLE[0], members=(*TABLE[0].members, "ablate.report.")), *TABLE[1:]]
    assert "ablate.report.frame belongs to 2 wings (foundation, report): keep it in one" in violations(GRAPH, table)


def test_a_listed_module_that_does_not_exist_yet_is_no_error():
    table = [dataclasses.replace(TABLE[0], members=(*TABLE[0].members, "ablate.not_yet")), *TABLE[1:]]
    assert violations(GRAPH, table) == violations(GRAPH, TABLE) and "ablate.not_yet" not in MODULES


@pytest.mark.parametrize(("module", "dep", "message"), [
    ("ablate.report.frame", "ablate.model.transformer", "ablate.report.frame (report) imports ablate.model.transformer "
     "(model): docs/architecture.md does not let report import model"),
    ("ablate.report.frame", "ablate.parts.attention", "ablate.report.frame (report) imports ablate.parts.attention "
     "(parts): docs/architecture.md does not let report import parts"),
    ("ablate.report.results", "ablate.data.batches", "ablate.report.results (report) imports ablate.data.batches "
     "(data): docs/architecture.md does not let report import data"),
    ("ablate.data.dataset", "ablate.parts.embeddings", "ablate.data.dataset (data) imports ablate.parts.embeddings "
     "(parts): docs/architecture.md does not let data import parts"),
    ("ablate.train.trainer", "ablate.parts.norms", "ablate.train.trainer (train) imports ablate.parts.norms "
     "(parts): docs/architecture.md does not let train import parts"),
    ("ablate.rundir", "ablate.train.job", "ablate.rundir (foundation) imports ablate.train.job "
     "(train): docs/architecture.md does not let foundation import train"),
])  # fmt: skip
def test_an_edge_the_table_does_not_allow_fails(module, dep, message):
    base = {**GRAPH, module: GRAPH[module] - {dep}}
    assert planted(violations({**base, module: base[module] | {dep}}, TABLE), violations(base, TABLE)) == [message]


def test_an_allowance_no_edge_uses_fails():
    """The doc says a wing may import more than the code does (a stale table: the doc once said train imports parts)."""
    by_name = {w.name: w for w in TABLE}
    report = dataclasses.replace(by_name["report"], modules=by_name["report"].modules | {"ablate.data.tokenizer"})
    train = dataclasses.replace(by_name["train"], wings=by_name["train"].wings | {"parts"})
    table = [report if w.name == "report" else train if w.name == "train" else w for w in TABLE]
    assert planted(unused(GRAPH, table), unused(GRAPH, TABLE)) == [
        "docs/architecture.md lets train import parts, but no train module does: take it out of the table",
        "docs/architecture.md lets report import ablate.data.tokenizer, but no report module does: take it out of the "
        "table",
    ]  # fmt: skip


def test_a_table_that_lets_a_wing_import_one_after_it_fails():
    report = next(w for w in TABLE if w.name == "report")
    table = [dataclasses.replace(w, wings=w.wings | {"sweep"}, modules=w.modules | {"ablate.check.run"})
             if w is report else w for w in TABLE]  # fmt: skip
    assert planted(out_of_order(table), out_of_order(TABLE)) == [
        "docs/architecture.md lets report import sweep, which is not before it",
        "docs/architecture.md lets report import ablate.check.run, which is not in a wing before it",
    ]


def test_a_table_widened_to_what_the_architecture_forbids_fails():
    by_name = {w.name: w for w in TABLE}
    report = dataclasses.replace(by_name["report"], wings=by_name["report"].wings | {"model"},
                                 modules=by_name["report"].modules | {"ablate.data.batches"})  # fmt: skip
    data = dataclasses.replace(by_name["data"], wings=by_name["data"].wings | {"parts"})
    table = [report if w.name == "report" else data if w.name == "data" else w for w in TABLE]
    assert forbidden(table) == [
        "docs/architecture.md lets data import parts, which the architecture forbids",
        "docs/architecture.md lets report import model, which the architecture forbids",
        "docs/architecture.md lets report import ablate.data.batches, which the architecture forbids: of that wing "
        "only ablate.data.corpus",
    ]  # fmt: skip


def test_a_doc_table_with_a_word_that_is_no_wing_is_refused():
    doc = DOC.read_text(encoding="utf-8").replace(
        "| foundation, parts, data | yes, but", "| foundation, parts, dat | yes, but"
    )
    with pytest.raises(AssertionError, match=r"docs/architecture\.md: model: imports: 'dat' is no wing"):
        read_table(doc)


def test_a_function_local_import_in_a_report_module_that_reaches_torch_fails():
    """ablate/report/frame.py with one import inside a function: the edge fails, and so does the chain to torch."""
    source = MODULES["ablate.report.frame"].read_text(encoding="utf-8")
    source += "\n\ndef planted():\n    from ablate.model.transformer import build_model\n"
    graph = {**GRAPH, "ablate.report.frame": {n for n in imports(source, "ablate.report", MODULES) if n in MODULES}}
    assert planted(violations(graph, TABLE), violations(GRAPH, TABLE)) == [
        "ablate.report.frame (report) imports ablate.model.transformer (model): docs/architecture.md does not let "
        "report import model"
    ]  # fmt: skip
    reach = planted(torch_reach(graph, TORCH, TABLE), torch_reach(GRAPH, TORCH, TABLE))
    assert ("ablate.report.frame must not reach torch, but does: ablate.report.frame -> ablate.model.transformer "
            "(imports torch)") in reach  # fmt: skip
    assert {v.partition(" ")[0] for v in reach} >= {"ablate.report.frame", "ablate.report.build"}


def test_a_torch_free_module_two_imports_from_torch_fails_and_a_named_exception_does_not():
    graph = {"ablate.record": {"ablate.files"}, "ablate.files": {"ablate.x"}, "ablate.x": set(),
             "ablate.check.measure": {"ablate.x"}}  # fmt: skip
    assert torch_reach(graph, {"ablate.x"}, TABLE) == [
        "ablate.files must not reach torch, but does: ablate.files -> ablate.x (imports torch)",
        "ablate.record must not reach torch, but does: ablate.record -> ablate.files -> ablate.x (imports torch)",
    ]
    assert imports_torch(imports("def f():\n    from torch.nn import functional\n", "ablate", MODULES))


def test_the_cycle_finder_finds_a_cycle_that_a_function_local_import_hides():
    """The check can fail: two modules whose only tie back is an import inside a function are one tangle."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n"
    assert imports(source, "ablate", MODULES) == {"typing", "x", "y"}  # ast.walk sees both: neither hides


def test_only_the_plugin_loader_and_the_public_names_import_by_a_computed_name():
    """An import whose name is computed would hide an edge from this test: only ablate/__init__.py's lazy names and
    registry.py's plugin loader may make one."""
    computed = {m for m, p in MODULES.items() if computed_imports(p.read_text(encoding="utf-8"))}
    assert computed == DYNAMIC_ANYWHERE


def test_a_planted_dynamic_import_in_a_report_module_fails():
    """`__import__("ablate.model")` (or importlib.import_module) in report/ is an edge report -> model, refused."""
    for call in ('__import__("ablate.model")', 'importlib.import_module("ablate.model.spec")'):
        source = MODULES["ablate.report.frame"].read_text(encoding="utf-8") + f"\n\ndef planted():\n    {call}\n"
        graph = {**GRAPH, "ablate.report.frame": {n for n in imports(source, "ablate.report", MODULES) if n in MODULES}}
        found = planted(violations(graph, TABLE), violations(GRAPH, TABLE))
        assert found and all("ablate.report.frame (report) imports ablate.model" in v for v in found), call
    assert computed_imports("import importlib\nimportlib.import_module(name)\n__import__(f'ablate.{x}')\n") == 2
