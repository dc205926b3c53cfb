"""`ablate report`: every table of an experiment computed once, then printed and written to <experiment>/report/.

load       the run directories (ablate.report.results), or, with `at="best-lr"`, each run at its best rate, or
           with `at_budget`, each run as it stood at that budget point
tables     the comparison (frame.py), every seed's scores (seeds.py), learning-rate sensitivity, BLEU by length,
           the paper's Table 3, the runs across budget points and their rank agreement (budgets.py), and budget
           points against runs trained to that budget alone
print      on the terminal, or rendered as md, csv, latex or html
write      <experiment>/report/: the comparison, learning-rate and paper tables in every format; every seed, BLEU
           by length, budgets, agreement and reproduced as md and csv; the run cards, the plots and index.html
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
from ablate.report.tables import FILES, main_table, print_table, render
from ablate.report.verdicts import Declared, declared

Table = tuple[pd.DataFrame, list[str]]  # a frame and the notes printed under it


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


def build(directory: Path, test: str = "bs", at: Literal["all", "best-lr"] = "all", columns: list[str] | None = None,
          sort: str | None = None, reverse: bool = False, budget: float | None = None,
          margin: float | None = None) -> Report:  # fmt: skip
    """Reads one experiment's results and computes its tables; `budget`: every run as it stood at that point;
    `margin`: judge equivalence within this margin instead of the declared one (design.json)."""
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
    title = f"{exp.name} ({directory})" + (", each run at its best learning rate" if at == "best-lr" else "")
    if budget is not None:
        title += f", every run at budget point {budget:g}"
    budgets = budget_table(source, declared_) if budget is None else None
    reproduced = reproduction(source, directory.resolve().parent) if budget is None else None
    return Report(exp, source, title, frame, notes, lr, literature_frame(exp, full), budgets, reproduced,
                  seeds_frame(exp), full, declared_)  # fmt: skip


BUDGETS_TITLE, AGREEMENT_TITLE = "effect against compute", "rank agreement across budgets"
REPRODUCED_TITLE = "budget points against runs trained to that budget alone"
SEEDS_TITLE = "every seed on every test split"


def print_report(console, report: Report, compact: bool = True) -> None:
    """The comparison on the terminal (`compact`: its main columns), then whichever of the learning-rate, the
    paper's, the budget, the rank-agreement and the reproduced tables the report has; every seed's scores after
    the comparison where it has a single run (a reproduction: no row to compare), in the files always."""
    print_table(console, report.title, report.frame, report.notes, compact)
    if report.seeds is not None and len(report.exp.runs) == 1:
        print_table(console, f"{report.exp.name}: {SEEDS_TITLE}", *report.seeds)
    if report.lr is not None:
        print_table(console, f"{report.exp.name}: learning-rate sensitivity", *report.lr)
    if report.against is not None:
        print_table(console, f"{report.exp.name}: {TITLE}", *report.against)
    if report.budgets is not None:
        print_table(console, f"{report.exp.name}: {BUDGETS_TITLE}", *budget_tables(report.budgets)[0])
        print_table(console, f"{report.exp.name}: {AGREEMENT_TITLE}", *budget_tables(report.budgets)[1])
    if report.reproduced is not None:
        print_table(console, f"{report.exp.name}: {REPRODUCED_TITLE}", *report.reproduced)


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
    chunks = [render("csv", r.frame.assign(experiment=r.exp.name)[["experiment", *r.frame.columns]], r.title, [])
              for r in reports]  # fmt: skip
    return "".join(chunks[:1] + ["".join(c.splitlines(keepends=True)[1:]) for c in chunks[1:]])  # the header once


def write_report(report: Report, compact: bool = True) -> list[Path]:
    """<experiment>/report/: the tables (see the module's docstring for which in which formats), the run cards,
    the plots and, last, index.html. `compact`: md, LaTeX, html and the page show the main columns with a legend
    (else the columns asked for); csv every column."""
    exp, frame, notes = report.source, report.frame, report.notes
    folder = exp.directory / "report"
    main, main_notes = main_table(frame, notes) if compact else (frame, notes)
    files = {name: render(fmt, frame if fmt == "csv" else main, report.title, notes if fmt == "csv" else main_notes)
             for fmt, name in FILES.items()} | {"cards.md": cards(exp)}  # fmt: skip
    tables = [("Comparison", main, main_notes)]  # what the page shows: a heading, a table, its notes
    if report.seeds is not None:  # seeds.md and seeds.csv
        files |= {f"seeds.{fmt}": render(fmt, report.seeds[0], f"{exp.name}: {SEEDS_TITLE}", report.seeds[1])
                  for fmt in ("md", "csv")}  # fmt: skip
        tables.append((SEEDS_TITLE[0].upper() + SEEDS_TITLE[1:], *report.seeds))
    if report.lr is not None:  # the learning-rate table beside the main one: lr.md, lr.csv, ...
        lr_frame, lr_notes = report.lr
        files |= {f"lr.{name.split('.')[1]}": render(fmt, lr_frame, f"{exp.name}: learning-rate sensitivity",
                                                     lr_notes) for fmt, name in FILES.items()}  # fmt: skip
        tables.append(("Learning-rate sensitivity", lr_frame, lr_notes))
    lengths = length_frame(exp)
    if lengths is not None:  # length.md and length.csv
        length_table, length_notes = lengths
        files |= {f"length.{fmt}": render(fmt, length_table, f"{exp.name}: BLEU by source length", length_notes)
                  for fmt in ("md", "csv")}  # fmt: skip
        tables.append(("BLEU by source length", length_table, length_notes))
    if report.against is not None:  # paper.md, paper.csv, ...: each row beside the paper's Table 3
        paper_table, paper_notes = report.against
        files |= {f"paper.{name.split('.')[1]}": render(fmt, paper_table, f"{exp.name}: {TITLE}", paper_notes)
                  for fmt, name in FILES.items()}  # fmt: skip
        tables.append((TITLE[0].upper() + TITLE[1:], paper_table, paper_notes))
    if report.budgets is not None:  # budgets.md and .csv; the rank agreement, agreement.md and .csv
        (budget_frame, budget_notes), agreement = budget_tables(report.budgets)
        files |= {f"budgets.{fmt}": render(fmt, budget_frame, f"{exp.name}: {BUDGETS_TITLE}", budget_notes)
                  for fmt in ("md", "csv")}  # fmt: skip
        files |= {f"agreement.{fmt}": render(fmt, agreement[0], f"{exp.name}: {AGREEMENT_TITLE}", agreement[1])
                  for fmt in ("md", "csv")}  # fmt: skip
        tables += [(BUDGETS_TITLE[0].upper() + BUDGETS_TITLE[1:], budget_frame, budget_notes),
                   (AGREEMENT_TITLE[0].upper() + AGREEMENT_TITLE[1:], *agreement)]  # fmt: skip
    if report.reproduced is not None:  # reproduced.md, reproduced.csv
        files |= {f"reproduced.{fmt}": render(fmt, *report.reproduced[:1], f"{exp.name}: {REPRODUCED_TITLE}",
                                              report.reproduced[1]) for fmt in ("md", "csv")}  # fmt: skip
        tables.append((REPRODUCED_TITLE[0].upper() + REPRODUCED_TITLE[1:], *report.reproduced))
    for name, content in files.items():
        write_text(folder / name, content)
    written = [folder / name for name in files]
    if figures.available():
        declared_ = report.declared
        margin = declared_.design.margin if declared_ is not None else None
        written += forest_plot(exp.name, report.comparison, margin, report.budgets, folder,
                               declared_.margin_text() if declared_ is not None else "")  # fmt: skip
        written += plots.write_plots(exp, folder, report.budgets)
    svgs = [p for p in written if p.suffix == ".svg"]
    absent = "nothing to plot" if figures.available() else "matplotlib is not installed"
    write_text(folder / "index.html", page(report.title, tables, files["cards.md"], svgs, absent))
    return [*written, folder / "index.html"]
