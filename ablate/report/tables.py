"""The comparison table as people read it: cells, and the file formats (md, csv, latex, html) and terminal.

ablate.report builds the table (a pandas frame, numbers for csv); this module renders it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ablate.report.frame import BUSY, SPEED, shared_gpu

TEXT_COLUMNS = {"run", "differs", "device", "precision", "status", "note", "GPU ids", "cores", "CI over", "budget",
                "stopped", "rates", "diverged at", "between", "trained alone as", "machine",
                "verdict", "decided at", "decoding", "split", "score"}  # fmt: skip  # left-aligned; the rest numbers
FILES = {"md": "table.md", "csv": "table.csv", "latex": "table.tex", "html": "table.html"}  # format -> report/ file
FORMATS = ("terminal", *FILES)  # what `ablate report --format` takes
SUFFIXES = {name[name.rindex(".") :]: fmt for fmt, name in FILES.items()}  # .tex -> latex: `--output` alone
TWO_DECIMALS = {"BLEU", "BLEU std", "chrF", "valid ppl", "max logit end", "logits norm end"}


def cell(column: str, value: Any, row: dict[str, Any], benched: bool = False) -> str:
    """A value as a reader sees it: BLEU with its spread, signed differences, ratios, thousands. `benched`: the speed
    columns are a bench's (ablate bench), which a busy training run does not skew; wall s still is the run's."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    busy_cores = row.get("core share") is not None and row["core share"] < BUSY
    busy = column in (("wall s",) if benched else SPEED) and (busy_cores or shared_gpu(row))
    return cell_of(column, value, row) + ("†" if busy else "")


def cell_of(column: str, value: Any, row: dict[str, Any]) -> str:
    if column == "BLEU" and row.get("BLEU std") is not None:
        return f"{value:.2f} ± {row['BLEU std']:.2f}"
    if column == "mean" and row.get("sd") is not None:  # every seed's table (seeds.py)
        return f"{value:.2f} ± {row['sd']:.2f} [{row['95% lo']:.2f}, {row['95% hi']:.2f}]"
    if column == "ΔBLEU":
        text = _signed(value)
        if row.get("ΔBLEU lo") is not None:
            low, high = row["ΔBLEU lo"], row["ΔBLEU hi"]
            text += f" [{_signed(low)}, {_signed(high)}]" + ("*" if low > 0 or high < 0 else "")
        return text
    if column == "p":
        return "< 0.001" if value < 0.001 else f"{value:.3f}"
    if column == "tok/s vs baseline":
        return f"{value:.2f}×"
    if column in ("MFU", "core share"):
        return f"{100 * value:.1f}%"
    if isinstance(value, float) and (column in TWO_DECIMALS or column.startswith(("BLEU ", "seed ", "mean"))):
        return f"{value:.2f}"
    if isinstance(value, float) and column in ("valid loss", "entropy end"):
        return f"{value:.3f}"
    if isinstance(value, int | float) and not isinstance(value, bool) and column in ("params", "train tok/s"):
        return f"{value:,.0f}"
    return str(value)


def _signed(value: float) -> str:
    return f"{value:+.2f}".replace("-", "−")  # a minus sign, not a hyphen


FOLDED = {"BLEU std": "BLEU", "ΔBLEU lo": "ΔBLEU", "ΔBLEU hi": "ΔBLEU", "sd": "mean", "95% lo": "mean",
          "95% hi": "mean"}  # fmt: skip  # shown inside another column's cell


def display(frame: pd.DataFrame, hidden: Sequence[str] = ()) -> tuple[list[str], list[list[str]]]:
    """Header and cells for people; the std is folded into BLEU, the interval into ΔBLEU. `hidden` columns are
    not shown, but still mark the cells they concern (a busy machine's speed figures)."""
    columns = [c for c in frame.columns if FOLDED.get(c) not in frame.columns and c not in hidden]
    rows = []
    for record in frame.to_dict("records"):
        rows.append([cell(c, record[c], record, frame.attrs.get("benched", False)) for c in columns])
    return columns, rows


def to_markdown(frame: pd.DataFrame) -> str:
    columns, rows = display(frame)
    lines = ["| " + " | ".join(columns) + " |", "|" + "".join("---|" if c in TEXT_COLUMNS else "--:|" for c in columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}  # fmt: skip
LATEX_SYMBOLS = {"±": r"$\pm$", "Δ": r"$\Delta$", "×": r"$\times$", "−": r"$-$", "<": r"$<$", ">": r"$>$"}


def latex_escape(text: str) -> str:
    out = "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)
    for symbol, command in LATEX_SYMBOLS.items():
        out = out.replace(symbol, command)
    return out


def to_latex(frame: pd.DataFrame) -> str:
    """A booktabs tabular, ready for \\input inside a table environment (needs \\usepackage{booktabs})."""
    columns, rows = display(frame)
    align = "".join("l" if c in TEXT_COLUMNS else "r" for c in columns)
    lines = [f"\\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(latex_escape(c) for c in columns) + r" \\",
             r"\midrule"]  # fmt: skip
    lines += [" & ".join(latex_escape(v) for v in r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def to_html(frame: pd.DataFrame, title: str, notes: list[str]) -> str:
    """A table whose text columns (TEXT_COLUMNS) are of class "text": left-aligned on the report's page, as md and
    LaTeX align them; the rest, numbers, right-aligned."""
    columns, rows = display(frame)
    tags = [' class="text"' if c in TEXT_COLUMNS else "" for c in columns]
    head = "".join(f"<th{tag}>{html.escape(c)}</th>" for c, tag in zip(columns, tags, strict=True))
    body = "\n".join("<tr>" + "".join(f"<td{tag}>{html.escape(v)}</td>" for v, tag in zip(r, tags, strict=True))
                     + "</tr>" for r in rows)  # fmt: skip
    caption = html.escape(title) + "".join(f"<br><small>{html.escape(n)}</small>" for n in notes)
    return (f'<table class="ablate">\n<caption>{caption}</caption>\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody>\n</table>\n")  # fmt: skip


def to_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False)


# The comparison table as a page or a paper prints it (md, LaTeX, html): the main columns, a legend under them; the
# csv keeps every column (device, cores, FLOPs, MFU, budget, ...), and so does `ablate report --columns all`.
MAIN = ["run", "differs", "BLEU", "BLEU std", "n", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "verdict", "valid loss",
        "train tok/s", "tok/s vs baseline", "peak MiB", "status"]  # fmt: skip
LEGEND = (
    "Legend: BLEU is the mean over the run's n seeds ± their standard deviation; ΔBLEU [lo, hi] the difference "
    "from the baseline with its 95% interval (* where it excludes 0); valid loss the validation cross-entropy in "
    "nats a target token; train tok/s source and target tokens a second of training, tok/s vs baseline its ratio "
    "to the baseline's; peak MiB the peak resident memory of the process on a CPU, torch's peak allocated memory on "
    "a GPU. Every other column (chrF, p, device, cores, FLOPs, MFU, budget, wall s, ...) is in the csv."
)


def main_table(frame: pd.DataFrame, notes: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """The comparison table's main columns (those it has) with the legend first among its notes."""
    main = frame[[c for c in MAIN if c in frame.columns]]
    main.attrs.update(frame.attrs)
    return main, [LEGEND, *notes]


def render(fmt: str, frame: pd.DataFrame, title: str, notes: list[str]) -> str:
    """The table in a file format, with its title and notes where the format has room for them."""
    if fmt == "md":
        return f"## {title}\n\n{to_markdown(frame)}\n" + "".join(f"{note}  \n" for note in notes)
    if fmt == "latex":
        return f"% {title}\n" + "".join(f"% {note}\n" for note in notes) + to_latex(frame)
    if fmt == "html":
        return to_html(frame, title, notes)
    return to_csv(frame)


# What the terminal shows unless asked for more (`ablate report --columns all`): what a reader needs first, in
# at most TERMINAL_WIDTH characters; the files (md, csv, latex, html) keep every column.
TERMINAL = ["run", "differs", "BLEU", "BLEU std", "n", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "verdict", "valid loss",
            "train tok/s", "peak MiB", "status"]  # fmt: skip
TERMINAL_WIDTH = 120
FREE_TEXT = ("differs", "verdict", "note")  # wrap at their spaces before a number or an interval does


def column_widths(columns: Sequence[str], rows: Sequence[Sequence[str]], free: Sequence[bool], room: int
                  ) -> list[int] | None:  # fmt: skip
    """Each column's width in `room` characters (padding left out): every column no narrower than its longest word,
    so that no word is cut; then the numbers on one line, the narrowest first; then the free text (`free`, which
    wraps at its spaces) as wide as its longest line; what is left, nowhere. None when the longest words alone do
    not fit: then rich folds words."""
    cells = [[column, *(row[i] for row in rows)] for i, column in enumerate(columns)]
    words = [max(len(word) for text in texts for word in text.split() or [""]) for texts in cells]
    lines = [max(len(text) for text in texts) for texts in cells]
    widths = list(words)
    left = room - sum(widths)
    if left < 0:
        return None
    fixed = sorted((lines[i] - widths[i], i) for i in range(len(columns)) if not free[i])
    for need, i in [*fixed, *((lines[i] - widths[i], i) for i in range(len(columns)) if free[i])]:
        grow = min(need, left)
        widths[i] += grow
        left -= grow
    return widths


def print_table(console, title: str, frame: pd.DataFrame, notes: list[str], compact: bool = False) -> None:
    """The table on a terminal (rich), its notes under it; brackets such as `[lo, hi]` are text, not markup.

    `compact`: TERMINAL's columns alone, wrapped to fit TERMINAL_WIDTH characters, and a note of what is left out.
    """
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    hidden = [c for c in frame.columns if c not in TERMINAL and FOLDED.get(c) not in TERMINAL] if compact else []
    if compact and "status" in frame.columns and set(frame["status"]) == {"completed"}:
        hidden.append("status")  # room for the rest in TERMINAL_WIDTH; the note says every run completed
    columns, rows = display(frame, hidden)
    table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD)
    for column in columns:
        table.add_column(escape(column), justify="left" if column in TEXT_COLUMNS else "right", overflow="fold")
    width = min(console.width, TERMINAL_WIDTH) if compact else console.width
    padding = table._extra_width + sum(table.padding[1] + table.padding[3] for _ in columns)  # edges, rules, pads
    widths = column_widths(columns, rows, [c in FREE_TEXT for c in columns], width - padding)
    for column, column_width in zip(table.columns, widths or [], strict=False):
        column.width = column_width  # else rich's own layout, which folds words where the longest do not fit
    for row in rows:
        table.add_row(*map(escape, row))
    console.print(table, width=min(console.width, TERMINAL_WIDTH) if compact else None)
    for note in notes:
        console.print(f"  {escape(note)}", highlight=False)
    if hidden:
        shown = [c for c in hidden if c != "status"]
        done = " Every run completed." if "status" in hidden else ""
        console.print(f"  Not shown here: {', '.join(shown)} (--columns all shows every column; the csv keeps "
                      f"them).{done}", highlight=False)  # fmt: skip
