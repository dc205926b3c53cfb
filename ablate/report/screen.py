"""`ablate report` on a terminal, in the page's order: a one-line summary, the comparison table, a legend of at most
five lines, the other tables, and where the page is.

Everything fits the console's width (ablate.terminal: in a pipe, COLUMNS or 120): a table leaves out its least
needed columns, named in one line, before a cell would wrap, and prose wraps at spaces outside numbers and
intervals. The notes that explain each column are on the page, not here. No torch.
"""

from __future__ import annotations

from ablate.report.build import AGREEMENT_TITLE, BUDGETS_TITLE, LR_TITLE, REPRODUCED_TITLE, SEEDS_TITLE, Report
from ablate.report.literature import TITLE
from ablate.report.summary import legend
from ablate.report.tables import left_out, print_table, terminal_table
from ablate.terminal import say, wrap

LEGEND_LINES = 5  # the most lines of legend under the comparison


def print_report(console, report: Report, compact: bool = True) -> None:
    """The summary, the comparison (`compact`: its main columns) and its legend, then whichever of the every-seed,
    learning-rate, paper, budget, rank-agreement and reproduced tables the report has, each fitted to the width."""
    name = report.exp.name
    say(console, f"{name}: {report.summary.line}")
    _comparison(console, report, compact, report.view[0].upper() + report.view[1:] if report.view else "")
    if report.seeds is not None and len(report.exp.runs) == 1:
        _other(console, report.titled(f"{name}: {SEEDS_TITLE}"), report.seeds[0])
    if report.lr is not None:
        _other(console, report.titled(f"{name}: {LR_TITLE}"), report.lr[0])
    if report.against is not None:  # its first note: how many rows go the paper's way
        _other(console, report.titled(f"{name}: {TITLE}"), report.against[0], report.against[1][:1])
    if report.budgets is not None:
        verdicts = [f"{run}: {line}" for run, line in report.budgets.verdicts.items()]
        if verdicts:
            verdicts.insert(0, "Verdicts, first against last budget point (holds, grows, shrinks, vanishes, flips, "
                            "emerges, or not resolved):")  # fmt: skip
        _other(console, report.titled(f"{name}: {BUDGETS_TITLE}"), report.budgets.frame, verdicts)
        _other(console, report.titled(f"{name}: {AGREEMENT_TITLE}"), report.budgets.agreement)
    if report.reproduced is not None:
        _other(console, report.titled(f"{name}: {REPRODUCED_TITLE}"), report.reproduced[0])


def _comparison(console, report: Report, compact: bool, title: str) -> None:
    """The comparison table, then at most LEGEND_LINES lines: what ΔBLEU and the verdict are, the columns left out."""
    table, dropped, hidden = terminal_table(report.frame, console.width, compact)
    if title:
        say(console, title)
    console.print(table)
    named = wrap(left_out(dropped, [], console.width), console.width, "  ") if dropped else []
    more = [c for c in hidden if c != "status"]
    items = [*legend(report.frame, report.declared, short=True),
             ("Every other column is in table.csv and on the page." if more else "")
             + (" Every run completed." if "status" in hidden else "")]  # fmt: skip
    lines: list[str] = []
    for item in filter(None, items):  # in order, while they leave room for the line that names the columns left out
        wrapped = wrap(item.strip(), console.width, "  ")
        if len(lines) + len(wrapped) + len(named) > LEGEND_LINES:
            break
        lines += wrapped
    for line in [*lines, *named]:
        console.out(line, highlight=False)


def _other(console, title: str, frame, notes: list[str] | None = None) -> None:
    console.out("", highlight=False)
    print_table(console, title, frame, notes or [])
