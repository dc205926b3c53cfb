"""The comparison table as people read it: cells, and the file formats (md, csv, latex, html) and terminal.

ablate.report builds the table (a pandas frame, numbers for csv); this module renders it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.table import Table

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


# What the terminal shows unless asked for more (`ablate report --columns all`): what a reader needs first; the files
# (md, csv, latex, html) keep every column. At the console's width, columns go from the end of PRIORITY first.
TERMINAL = ["run", "differs", "BLEU", "BLEU std", "n", "ΔBLEU", "ΔBLEU lo", "ΔBLEU hi", "verdict", "valid loss",
            "train tok/s", "peak MiB", "status"]  # fmt: skip
# Every table's columns, the most needed first: a table that does not fit the width loses those it lists last (and
# before them any it does not list, rightmost first), never its first column.
PRIORITY = ["run", "ΔBLEU", "verdict", "between", "budget", "agrees", "we find", "paper says", "τ of single seeds",
            "τ of means", "best lr", "sensitivity", "split", "score", "mean", "seed", "trained alone as", "BLEU",
            "BLEU alone", "status", "differs", "n", "runs", "decided at", "seeds for 80%", "row", "ΔPPL",
            "paper ΔBLEU", "paper ΔPPL", "valid loss", "train tok/s", "peak MiB", "change"]  # fmt: skip
FREE_TEXT = ("differs", "verdict", "note", "change", "paper", "decoding", "trained alone as")  # wrap at spaces


def terminal_table(frame: pd.DataFrame, width: int, compact: bool = False) -> tuple[Any, list[str], list[str]]:
    """The table as rich prints it, at most `width` wide (ablate.terminal.fit: every cell on one line, the least
    needed columns left out until the rest fit); the columns it left out to fit, and those `compact` hides (TERMINAL's
    alone; status where every run completed)."""
    from ablate.terminal import fit

    hidden = [c for c in frame.columns if c not in TERMINAL and FOLDED.get(c) not in TERMINAL] if compact else []
    if compact and "status" in frame.columns and set(frame["status"]) == {"completed"}:
        hidden.append("status")
    columns, rows = display(frame, hidden)
    keep = sum(c in ("run", "ΔBLEU", "verdict") for c in columns) or 1
    table, dropped = fit(columns, rows, width, right=[c for c in columns if c not in TEXT_COLUMNS],
                         priority=PRIORITY, keep=keep, wraps=FREE_TEXT)  # fmt: skip
    return table, dropped, hidden


def print_table(console, title: str, frame: pd.DataFrame, notes: list[str], compact: bool = False) -> None:
    """The table on a terminal, at most the console's width (terminal_table), its title and notes wrapped whole
    (ablate.terminal.say), and a line naming the columns it left out. `compact`: TERMINAL's columns alone."""
    from ablate.terminal import say

    table, dropped, hidden = terminal_table(frame, console.width, compact)
    if title:
        say(console, title)
    console.print(table)
    for note in notes:
        say(console, note, "  ")
    line = left_out(dropped, hidden, console.width)
    if line:
        say(console, line, "  ")


def left_out(dropped: list[str], hidden: list[str], width: int) -> str:
    """The line that names the columns a table left out to fit `width`, and says where the others are."""
    text = f"Not shown at {width} columns: {', '.join(dropped)}." if dropped else ""
    if [c for c in hidden if c != "status"]:
        text += " Every other column is in the csv (--columns all asks for them here)."
    return (text + (" Every run completed." if "status" in hidden else "")).strip()


def speed_table(record: Any) -> Table:
    """A bench's record (ablate.record.SpeedRecord) as the terminal shows it."""
    table = Table(title=f"{record.experiment}: {record.machine}, {record.rounds} rounds, {record.seconds:.0f} s",
                  title_justify="left")  # fmt: skip
    for column in ("run", "ms/update", "tok/s", "vs baseline [95%]", "greedy sent/s", "beam sent/s", "peak MiB", "MFU"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for r in record.runs:
        ratio = "1" if r.ratio is None else f"{r.ratio.estimate:.2f} [{r.ratio.low:.2f}, {r.ratio.high:.2f}]"
        table.add_row(r.run, f"{r.step_ms:,.0f}", f"{r.tokens_per_s:,.0f}", ratio, _number(r.greedy_sentences_per_s),
                      _number(r.beam_sentences_per_s), _number(r.peak_memory_mib, 0), _number(r.mfu, 3))  # fmt: skip
    return table


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"
