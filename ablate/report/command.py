"""`ablate report` and the end of `ablate run`: each experiment's summary, comparison table and verdicts printed in
the page's order, its report written (or, for a view, only printed), and where the page is. No torch."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ablate.errors import UserError
from ablate.files import write_text
from ablate.report import figures
from ablate.report.build import build, render_all, write_report
from ablate.report.results import find_experiments
from ablate.report.screen import print_report
from ablate.report.tables import SUFFIXES, print_table
from ablate.terminal import say


@dataclass(frozen=True)
class ReportOptions:
    """What `ablate report`'s flags ask for; the defaults are the experiment's own report, written to report/."""

    significance: str = "bs"
    at: Literal["all", "best-lr"] = "all"
    columns: str | None = None  # comma-separated, or "all"
    sort: str | None = None
    reverse: bool = False
    at_budget: float | None = None
    margin: float | None = None
    format: str = "terminal"
    output: Path | None = None
    no_files: bool = False

    @property
    def view(self) -> bool:
        """A view (another margin, budget, order, columns or test) prints, and writes only with --output DIR."""
        return (any(v not in (None, False) for v in (self.margin, self.at_budget, self.columns, self.sort))
                or self.reverse or self.at != "all" or self.significance != "bs")  # fmt: skip


def report(results_dir: Path, options: ReportOptions, out) -> int:
    """`ablate report DIR`: every experiment under DIR built once, printed or rendered, its report written unless a
    view or --no-files says not to; the last line says where each page is."""
    columns = [c.strip() for c in options.columns.split(",")] if options.columns not in (None, "all") else None
    fmt, folder = options.format, None
    if options.output is not None and fmt == "terminal":  # the file says which: table.tex is LaTeX; no suffix, a folder
        fmt = SUFFIXES.get(options.output.suffix.lower(), "")
        if not fmt and (options.output.suffix and not options.output.is_dir()):
            raise UserError(f"ablate report: --output {options.output}: give --format md, csv, latex or html, a file "
                            f"ending in {', '.join(SUFFIXES)}, or a directory for the whole report")  # fmt: skip
        folder, fmt = (options.output, "terminal") if not fmt else (None, fmt)
    if options.output is not None and folder is None and options.output.is_dir():
        raise UserError(f"ablate report: --output {options.output}: a directory, where --format {fmt} writes one "
                        "file; name a file, or leave out --format for the whole report in the directory")  # fmt: skip
    view = options.view
    experiments = find_experiments(results_dir)
    if folder is not None and view:
        for directory in experiments:
            if folder.resolve() == (directory / "report").resolve():
                raise UserError(f"ablate report: --output {folder}: a view is never written into the experiment's "
                                "report/, which holds its declared report; give another directory")  # fmt: skip
    compact = options.columns is None
    reports, written = [], []
    for directory in experiments:
        built = build(directory, options.significance, options.at, columns, options.sort, options.reverse,
                      options.at_budget, options.margin, every_column=options.columns == "all")  # fmt: skip
        reports.append(built)
        if fmt == "terminal":
            print_report(out, built, compact=compact)
        if folder is not None or not (view or options.no_files):
            where = None if folder is None else folder / directory.name if len(experiments) > 1 else folder
            try:
                written += write_report(built, compact=compact, folder=where)
            except OSError as error:
                target = where or directory / "report"
                raise UserError(f"ablate report: {target}: not written ({error.strerror or error})") from None
            if not figures.available():
                say(out, "plots: not drawn, matplotlib (a dependency of ablate) is missing: pip install "
                    "'matplotlib>=3.7'")  # fmt: skip
    text = render_all(reports, fmt, compact=compact) if fmt != "terminal" else ""
    if options.output is not None and folder is None:
        try:
            write_text(options.output, text)
        except OSError as error:
            raise UserError(
                f"ablate report: --output {options.output}: not written ({error.strerror or error})"
            ) from None
        out.out(f"written: {options.output}", highlight=False)  # a path: one line, whatever the width
    elif text:
        sys.stdout.write(text)
    pages = [p for p in written if p.name == "index.html"]
    if pages:
        out.out(f"page: {', '.join(map(str, pages))}", highlight=False)
    elif view and fmt == "terminal":
        say(out, "A view: nothing written (report/ keeps the declared report; --output DIR writes this one).")
    elif fmt == "terminal":
        kept = [str(p) for d in experiments if (p := d / "report" / "index.html").is_file()]
        say(out, f"page: {', '.join(kept)} (not rewritten: --no-files)" if kept else "page: none (--no-files)")
    return 0


def after_run(directory: Path, trained: bool, out, table: tuple | None = None) -> None:
    """The end of `ablate run` for one experiment: the comparison and verdicts `ablate report` prints, and the page,
    written again when this run trained something (else the one on disk is named, or how to write one). Where the
    report cannot be made (runs of one experiment scored on different test sentences, say), `table` (the summary's
    title, frame and notes) is printed instead, with why, and the run's own outcome stands."""
    try:
        built = build(directory)
    except (UserError, ValueError) as error:
        if table is not None:
            print_table(out, *table, compact=True)
        say(out, f"no intervals or verdicts: {error}; `ablate report {directory}` says more")
        return
    print_report(out, built)
    page = directory / "report" / "index.html"
    if trained:
        try:
            write_report(built)
        except OSError as error:  # the runs are finished and kept: only the page is missing
            say(out, f"page: not written ({error.strerror or error}); `ablate report {directory}` writes it")
            return
        say(out, f"page: {page}")
    elif page.is_file():
        say(out, f"page: {page} (nothing trained now: `ablate report {directory}` writes it again)")
    else:
        say(out, f"page: none yet: `ablate report {directory}` writes it")
