"""What a command prints on a terminal or into a pipe: its width, prose wrapped whole, and tables that fit.

Nothing here splits a number, an interval or a word. A table keeps every cell on one line and drops its least
needed columns until the rest fit the width (the caller names them, in one line); only where even the columns it
must keep do not fit do the free-text ones wrap, at their spaces. Prose wraps at spaces outside intervals
(`[−3.50, −1.36]`) and spreads (`38.48 ± 0.24`). No torch.
"""

from __future__ import annotations

import io
import os
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

# In a pipe or a file there is no terminal to ask: COLUMNS when it is set, else this. 120 is the width the
# comparison table is laid out for; rich's own default there, 80, would drop half its columns in every log.
PIPE_WIDTH = 120


class Screen(Console):
    """rich's Console, but a closed pipe (`ablate report ... | head`) raises BrokenPipeError, which the command ends
    on quietly with the shell's code for it (ablate.cli), where rich would exit 1, the code of a failed run."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    """Rich on a terminal, as wide as the terminal (or COLUMNS); in a pipe or a file, plain text COLUMNS characters
    wide, else PIPE_WIDTH."""
    if sys.stdout.isatty():
        return Screen()
    columns = os.environ.get("COLUMNS", "")
    return Screen(width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH, no_color=True)


# What wraps as one word: a short bracket with its mark (`[−11.05, −8.00]*`, `[lo, hi]`), a value with its spread
# (`38.48 ± 0.24`), `±1`, `10 seeds`: their spaces are placeholders while the text wraps.
WHOLE = re.compile(r"\[[^\[\]]{0,24}\]\*?|[−+-]?\d[\d.,]*%? ± [\d.,]+%?|± ?\d[\d.,]*|\d[\d.,]* (?=seeds?\b)")
KEEP = "\x00"


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """`text` in lines of at most `width` characters where its words allow, broken at spaces only: never inside a
    word, a number, an interval or a value with its spread; a word longer than the width has a line of its own."""
    kept = WHOLE.sub(lambda m: m.group(0).replace(" ", KEEP), text)
    lines = textwrap.wrap(kept, max(width, 1), initial_indent=indent, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False)  # fmt: skip
    return [line.replace(KEEP, " ") for line in lines] or [indent.rstrip()]


def say(out: Console, text: str, indent: str = "") -> int:
    """Prints `text` wrapped to the console's width (wrap); the number of lines printed."""
    lines = wrap(text, out.width, indent)
    for line in lines:
        out.out(line, highlight=False)
    return len(lines)


def fit(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int, *, right: Iterable[str] = (),
        priority: Sequence[str] = (), keep: int = 1, wraps: Iterable[str] = (),
        table_box: box.Box = box.SIMPLE_HEAD) -> tuple[Table, list[str]]:  # fmt: skip
    """A rich table of `columns` and their `rows` (cells as text) at most `width` characters wide, and the columns
    it left out, in their order.

    Every cell stays on one line; a header wraps at its spaces. Columns go, least needed first, until the rest fit:
    `priority` lists the most needed first (those it does not list go before any it does, the rightmost first), and
    its first `keep` never go; then any column left out that fits in the room left comes back, the most needed
    first. Where the kept alone do not fit, the `wraps` columns (free text) wrap at their spaces, and where even
    that does not fit, the kept go too, all but the first.
    `right`: the columns aligned right (numbers).
    """
    right, wraps = set(right), set(wraps)
    rank = {c: i for i, c in enumerate(priority)}
    order = sorted(range(len(columns)), key=lambda i: (rank.get(columns[i], len(rank)), i))  # the rightmost go first
    kept = sorted(order[: max(keep, 1)])
    shown = list(range(len(columns)))
    need = [max([*(len(str(r[i])) for r in rows), *(len(w) for w in columns[i].split() or [""])])
            for i in range(len(columns))]  # fmt: skip

    def build(indices: list[int], fixed: bool) -> Table:
        table = Table(box=table_box, show_edge=table_box is not box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for i in indices:
            free = not fixed and columns[i] in wraps
            table.add_column(escape(columns[i]), justify="right" if columns[i] in right else "left",
                             width=None if free else need[i], no_wrap=False, overflow="fold")  # fmt: skip
        for row in rows:
            table.add_row(*(escape(str(row[i])) for i in indices))
        return table

    dropping = list(reversed(order))  # the least needed first
    while _width(build(shown, fixed=True)) > width and dropping and dropping[0] not in kept:
        shown.remove(dropping.pop(0))
    for i in order if _width(build(shown, fixed=True)) <= width else ():  # a narrower one left out may fit again
        if i not in shown and _width(build(sorted([*shown, i]), fixed=True)) <= width:
            shown = sorted([*shown, i])
    table = build(shown, fixed=True)
    if _width(table) > width:  # the columns kept do not fit on one line each: free text wraps at its spaces
        while _width(build(shown, fixed=False), least=True) > width and len(shown) > 1:
            shown.remove(dropping.pop(0))  # and where even that does not fit, the kept go too, never the first
        table = build(shown, fixed=False)
        table.width = width if _width(table) > width else None
    return table, [columns[i] for i in range(len(columns)) if i not in shown]


def _width(table: Table, least: bool = False) -> int:
    """How wide the table prints, on a console wide enough for all of it; `least`: the narrowest it can wrap to, its
    free text at its spaces."""
    wide = Console(width=100_000, file=io.StringIO(), color_system=None)
    measured = Measurement.get(wide, wide.options, table)
    return measured.minimum if least else measured.maximum
