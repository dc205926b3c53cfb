"""`ablate report`: every table of an experiment computed once, then printed and written to <experiment>/report/.

load       the run directories (ablate.report.results), or, with `at="best-lr"`, each run at its best rate, or
           with `at_budget`, each run as it stood at that budget point
tables     the comparison (frame.py), every seed's scores (seeds.py), learning-rate sensitivity, BLEU by length,
           the paper's Table 3, the runs across budget points and their rank agreement (budgets.py), and budget
           points against runs trained to that budget alone
print      on the terminal (ablate.report.screen), or rendered as md, csv, latex or html
write      <experiment>/report/: the comparison, learning-rate and paper tables in every format; every seed, BLEU
           by length, budgets, agreement and reproduced as md and csv; the run cards, the plots and index.html.
           A view (another margin, a budget point, some columns, ...) is written only where `--output DIR` says,
           never into report/, which holds the experiment's own report
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from ablate.errors import UserError
from ablate.files import write_text
from ablate.report import figures, plots
from ablate.report.breakdown import length_frame, optional_frame
from ablate.report.budgets import Budgets, at_budget, budget_table, reproduction
from ablate.report.cards import cards
from ablate.report.decide import Design
from ablate.report.forest import forest_plot
from ablate.report.frame import report_frame, select
from ablate.report.literature import TITLE, literature_frame
from ablate.report.page import page
from ablate.report.results import ExperimentResults, load_results
from ablate.report.seeds import seeds_frame
from ablate.report.sensitivity import at_best_lr, sensitivity_frame, swept
from ablate.report.summary import Summary, legend, summarise
from ablate.report.tables import FILES, main_table, render
from ablate.report.verdicts import Declared, declared

Table = tuple[pd.DataFrame, list[str]]  # a frame and the notes printed under it
NO_SUMMARY = Summary(None, "", "")


@dataclass
class Report:
    """One experiment's tables, each computed once."""

    exp: ExperimentResults  # the rows of the comparison (each run at its best rate with at="best-lr")
    source: ExperimentResults  # every run as trained: what the cards, plots and the other tables read
    title: str
    frame: pd.DataFrame  # the comparison as asked for (--columns, --sort)
    notes: list[str]
    lr: Table | None  # learning-rate sensitivity, in a learning-rate sweep
    against: Table | None  # each row beside the paper's Table 3, where a run changes one of its settings
    budgets: Budgets | None  # every run at every budget point, where runs have several
    reproduced: Table | None  # budget points against runs trained to that budget alone, where there are some
    seeds: Table | None = None  # every seed's scores on every test split, earlier decodings beside them
    comparison: pd.DataFrame | None = None  # the comparison with every column: what the forest plot draws
    declared: Declared | None = None  # the design its verdicts follow (the margin the forest plot shades)
    summary: Summary = NO_SUMMARY  # the question and the verdicts in words: the first lines of the page and terminal
    view: str = ""  # what a view changed (`view: margin ±3, not the declared ±1`); "" for the experiment's report

    def titled(self, title: str) -> str:
        """A table's title, with what a view changed: every table of a view says it is one."""
        return f"{title}, {self.view}" if self.view else title


def build(directory: Path, test: str = "bs", at: Literal["all", "best-lr"] = "all", columns: list[str] | None = None,
          sort: str | None = None, reverse: bool = False, budget: float | None = None,
          margin: float | None = None, every_column: bool = False) -> Report:  # fmt: skip
    """Reads one experiment's results and computes its tables; `budget`: every run as it stood at that point;
    `margin`: judge equivalence within this margin instead of the declared one (design.json); `every_column`: the
    table's every column (`--columns all`). Any of them but the defaults makes a view, which every title names."""
    declared_ = declared(directory, margin)
    source = exp = load_results(directory)
    if budget is not None:
        source = exp = at_budget(source, budget)
    lr = sensitivity_frame(source) if swept(source) else None
    if at == "best-lr":
        if lr is None:
            raise UserError(f"--at best-lr: {directory} holds no learning-rate sweep (set lr_sweep, or "
                            "ablate run --lr-sweep)")  # fmt: skip
        exp = at_best_lr(source)
    if declared_ is not None and declared_.design.sequential and (budget is not None or at == "best-lr"):
        declared_ = Declared(Design(declared_.design.margin, declared_.design.alpha), [], declared_.source +
                             "; one look at this view's seeds, not the sweep's sequential design")  # fmt: skip
    full, notes = report_frame(exp, test, declared_)
    optional = optional_frame(exp) if columns or sort else None  # it reads every diagnostics.jsonl
    frame = select(full, columns, sort, reverse, optional)
    view = view_of(directory, margin, at, budget, ["every column"] if every_column else columns, sort, reverse, test)
    title = f"{exp.name} ({directory})" + (f", {view}" if view else "")
    budgets = budget_table(source, declared_) if budget is None else None
    reproduced = reproduction(source, directory.resolve().parent) if budget is None else None
    summary = summarise(exp, full, declared_.margin_text() if declared_ is not None else "")
    return Report(exp, source, title, frame, notes, lr, literature_frame(exp, full), budgets, reproduced,
                  seeds_frame(exp), full, declared_, summary, view)  # fmt: skip


TESTS = {"ar": "p by approximate randomisation", "none": "no significance test: no intervals, no verdicts"}


def view_of(directory: Path, margin: float | None, at: str, budget: float | None, columns: list[str] | None,
            sort: str | None, reverse: bool, test: str) -> str:  # fmt: skip
    """`view: margin ±3, not the declared ±1; ...`: what the report's options changed from the experiment's own report
    (its declared design, every run, every column); "" when they changed nothing."""
    said = []
    if margin is not None:
        record = declared(directory)
        was = record.design.margin if record is not None else None
        declared_as = (
            "none was declared" if was is None else "as declared" if was == margin else f"not the declared ±{was:g}"
        )
        said.append(f"margin ±{margin:g}, {declared_as}")
    if at == "best-lr":
        said.append("each run at its best learning rate")
    if budget is not None:
        said.append(f"every run at budget point {budget:g}")
    if test in TESTS:
        said.append(TESTS[test])
    if columns:
        said.append(columns[0] if columns == ["every column"] else f"columns {', '.join(columns)}")
    if sort:
        said.append(f"sorted by {sort}" + (", reversed" if reverse else ""))
    elif reverse:
        said.append("reversed")
    return "view: " + "; ".join(said) if said else ""


BUDGETS_TITLE, AGREEMENT_TITLE = "effect against compute", "rank agreement across budgets"
REPRODUCED_TITLE = "budget points against runs trained to that budget alone"
SEEDS_TITLE, LENGTH_TITLE = "every seed on every test split", "BLEU by source length"
LR_TITLE = "learning-rate sensitivity (Wortsman et al. 2023)"


def budget_tables(budgets: Budgets) -> tuple[Table, Table]:
    """The table of runs at budget points, the verdicts among its notes; and the rank agreement table."""
    verdicts = [f"{run}: {line}" for run, line in budgets.verdicts.items()]
    if verdicts:
        verdicts.insert(0, "Verdicts, first against last budget point (holds, grows, shrinks, vanishes, flips, "
                        "emerges, or not resolved where the intervals do not say):")  # fmt: skip
    return (budgets.frame, [*budgets.notes, *verdicts]), (budgets.agreement, budgets.agreement_notes)


def render_all(reports: list[Report], fmt: str, compact: bool = True) -> str:
    """Every comparison in one format (md, LaTeX, html: `compact`, the main columns with a legend; else the columns
    asked for); csv is one table of every column, its rows told apart by an `experiment` column."""
    if fmt != "csv":
        tables = [(main_table(r.frame, r.notes) if compact else (r.frame, r.notes), r.title) for r in reports]
        return "".join(render(fmt, main, title, notes) for (main, notes), title in tables)
    frames = [(r.frame.assign(view=r.view) if r.view else r.frame).assign(experiment=r.exp.name) for r in reports]
    chunks = [render("csv", f[["experiment", *f.columns.drop("experiment")]], "", []) for f in frames]
    return "".join(chunks[:1] + ["".join(c.splitlines(keepends=True)[1:]) for c in chunks[1:]])  # the header once


def write_report(report: Report, compact: bool = True, folder: Path | None = None) -> list[Path]:
    """The report's files in `folder` (default <experiment>/report/): the tables (see the module's docstring for which
    in which formats), the run cards, the plots and, last, index.html. `compact`: md, LaTeX, html and the page show
    the main columns with a legend (else the columns asked for); csv every column. A view's tables and figures say
    so in their titles, and its csvs in a `view` column."""
    exp, frame, notes = report.source, report.frame, report.notes
    folder = folder or exp.directory / "report"
    folder.mkdir(parents=True, exist_ok=True)
    main, main_notes = main_table(frame, notes) if compact else (frame, notes)
    files: dict[str, str] = {}

    def add(stem: str, formats: tuple[str, ...], table: pd.DataFrame, title: str, table_notes: list[str]) -> None:
        for fmt in formats:
            shown = table.assign(view=report.view) if fmt == "csv" and report.view else table
            files[f"{stem}.{FILES[fmt].split('.')[1]}"] = render(fmt, shown, report.titled(title), table_notes)

    add("table", ("md", "latex", "html"), main, report.title.removesuffix(f", {report.view}"), main_notes)
    add("table", ("csv",), frame, "", [])
    files["cards.md"] = cards(exp)
    tables = []  # what the page shows under the comparison, collapsed: a heading, a table, its notes
    every = tuple(FILES)
    for stem, formats, found, title in (
        ("seeds", ("md", "csv"), report.seeds, SEEDS_TITLE), ("lr", every, report.lr, LR_TITLE),
        ("length", ("md", "csv"), length_frame(exp), LENGTH_TITLE), ("paper", every, report.against, TITLE),
        *((("budgets", ("md", "csv"), budget_tables(report.budgets)[0], BUDGETS_TITLE),
           ("agreement", ("md", "csv"), budget_tables(report.budgets)[1], AGREEMENT_TITLE))
          if report.budgets is not None else ()),
        ("reproduced", ("md", "csv"), report.reproduced, REPRODUCED_TITLE),
    ):  # fmt: skip
        if found is not None:
            add(stem, formats, found[0], f"{exp.name}: {title}", found[1])
            tables.append((report.titled(title[0].upper() + title[1:]), *found))
    for name, content in files.items():
        write_text(folder / name, content)
    written = [folder / name for name in files]
    if figures.available():
        declared_ = report.declared
        margin = declared_.design.margin if declared_ is not None else None
        written += forest_plot(exp.name, report.comparison, margin, report.budgets, folder,
                               declared_.margin_text() if declared_ is not None else "", view=report.view)  # fmt: skip
        written += plots.write_plots(exp, folder, report.budgets)
    svgs = [p for p in written if p.suffix == ".svg"]
    absent = "nothing to plot" if figures.available() else "matplotlib is not installed"
    comparison = (report.titled("Comparison"), main, main_notes[1:] if compact else main_notes)
    text = page(report.title, report.summary, comparison, legend(main, report.declared), tables, files["cards.md"],
                svgs, absent, report.view)  # fmt: skip
    write_text(folder / "index.html", text)
    return [*written, folder / "index.html"]
