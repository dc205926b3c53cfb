"""`ablate report` on a terminal and in a pipe (issue 76): a summary line, the table, at most 5 lines of legend, where
the page is; no number, interval or word split at any width; every table, rich ones included, fits the width; and
a view (--margin, --at-budget, ...) prints, writing only where --output DIR says, never into report/.

Through the CLI, as a user types it, on the committed results/pe (read only).
"""

import csv
import io
import re

import pytest

from ablate.report.frame import COLUMNS
from ablate.terminal import fit, wrap
from tests.conftest import ROOT, cli

PE = str(ROOT / "results" / "pe")
INTERVAL = re.compile(r"\[[−+]?\d+\.\d\d, [−+]?\d+\.\d\d\]")


def printed(*args: str, columns: int | None) -> str:
    done = cli("report", PE, "--no-files", *args, env={"COLUMNS": str(columns)} if columns else None)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def outputs() -> dict[int | str | None, str]:
    """What `ablate report results/pe` prints at 80 and 120 columns, and in a pipe with no COLUMNS (120); and at
    1,000 with every column, where nothing wraps or is left out."""
    out: dict[int | str | None, str] = {width: printed(columns=width) for width in (80, 120, None)}
    return out | {"whole": printed("--columns", "all", columns=1000)}


@pytest.mark.parametrize("width", [80, 120, None])
def test_every_line_fits_and_no_interval_number_or_word_is_split(outputs, width):
    text, room = outputs[width], width or 120
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= room
    for line in lines:  # an interval opens and closes on one line, and is one of the report's whole intervals
        assert line.count("[") == line.count("]"), line
    intervals = set(INTERVAL.findall(outputs[120]))
    assert "[−11.05, −8.00]" in intervals and "[−0.79, +2.24]" in intervals
    assert set(INTERVAL.findall(text)) == intervals  # every one of them, whole, at this width too
    said = "Not shown at columns. Every other column is in table.csv and on the page. Every run completed."
    page = lines.index(next(line for line in lines if line.startswith("page: ")))
    whole = " ".join([outputs["whole"], *COLUMNS, said, *lines[page:]])  # the last lines say where the page is
    words = {w.strip(".,;:()") for w in re.findall(r"\S+", whole)}
    for token in re.findall(r"\S+", text):  # a word cut in two would leave a piece no whole text has
        assert set(token) == {"─"} or token.strip(".,;:()") in words or token.strip(".,;:()").isdigit(), (width, token)


@pytest.mark.parametrize("width", [80, 120, None])
def test_a_summary_line_the_table_at_most_five_lines_of_legend_then_the_other_tables(outputs, width):
    lines = outputs[width].splitlines()
    first = " ".join(lines[: lines.index(next(line for line in lines if line.startswith("run ")))])
    assert first.startswith("pe: learned and none are worse than the baseline (positions sinusoidal); rotary is "
                            "undecided (about 10 seeds a side would resolve it).")  # fmt: skip
    rule = next(i for i, line in enumerate(lines) if set(line) == {"─"})
    rows = [line.split()[0] for line in lines[rule + 1 : rule + 5]]
    assert rows == ["baseline", "learned", "none", "rotary"]
    legend = lines[rule + 5 : lines.index("", rule)]
    assert 1 <= len(legend) <= 5 and all(line.startswith("  ") for line in legend)
    assert any(line.startswith("  ΔBLEU [lo, hi]: ") for line in legend)
    assert "pe: against the paper (Vaswani et al. 2017, Table 3)" in outputs[width]
    assert "pe: effect against compute" in outputs[width]


def test_columns_go_before_a_cell_wraps_and_the_line_names_them(outputs):
    narrow, wide = outputs[80].splitlines(), outputs[120].splitlines()
    header = next(line for line in narrow if line.startswith("run "))
    assert "valid" not in header and "ΔBLEU" in header and "verdict" in header
    assert "  Not shown at 80 columns: valid loss, train tok/s, peak MiB." in narrow
    assert not any(line.startswith("  Not shown at 120 columns") for line in wide[:12])  # the main table fits
    assert "  Not shown at 80 columns: change, paper." in narrow  # the paper's table, rich, fits too


def test_the_page_is_the_last_line_and_a_view_writes_nothing_into_report(tmp_path):
    done = cli("report", PE, "--margin", "3", env={"COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    title = lines.index("View: margin ±3, not the declared ±1")  # the table's title says it is a view
    assert "rotary is equivalent to the baseline" in " ".join(lines[:title])
    assert lines[-1] == "A view: nothing written (report/ keeps the declared report; --output DIR writes this one)."
    assert "pe: effect against compute, view: margin ±3, not the declared ±1" in done.stdout
    inside = cli("report", PE, "--margin", "3", "--output", str(ROOT / "results" / "pe" / "report"))
    assert inside.returncode == 2 and "a view is never written into the experiment's report/" in inside.stderr


def test_a_view_is_written_where_output_says_and_every_table_and_figure_says_it_is_one(tmp_path):
    folder = tmp_path / "margin3"
    done = cli("report", PE, "--margin", "3", "--output", str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"page: {folder / 'index.html'}"
    said = "view: margin ±3, not the declared ±1"
    for name in ("table.md", "paper.md", "budgets.md", "agreement.md", "seeds.md", "table.tex", "table.html"):
        assert said in (folder / name).read_text(encoding="utf-8"), name
    for name in ("table.csv", "budgets.csv", "paper.csv"):
        rows = list(csv.DictReader(io.StringIO((folder / name).read_text(encoding="utf-8"))))
        assert rows and {row["view"] for row in rows} == {said}, name
    assert said in (folder / "forest.svg").read_text(encoding="utf-8")
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert f'<p class="view">{said}: not the experiment' in page


def test_the_forest_budget_panels_judge_as_the_comparison_does():
    """The same runs at the same point read the same: pe's last budget point is its comparison (every seed reached
    8,000 steps), so under any margin its panel's verdicts are the comparison's. Under margin 3 rotary read
    `equivalent` in the comparison (3 rows corrected together) and `undecided` at 8,000 steps, where the budget
    table corrected over all 12 of its rows."""
    from pathlib import Path

    from ablate.report.build import build
    from ablate.report.forest import panels

    for margin in (None, 3.0):
        report = build(Path(PE), margin=margin)
        drawn = dict(panels(report.comparison, report.budgets))
        comparison = {r.run: r for r in drawn["the comparison"]}
        last = {r.run: r for r in drawn["at 8000 steps"]}
        assert comparison == last, margin
    assert comparison["rotary"].verdict == "equivalent"


def test_wrap_keeps_intervals_spreads_and_words_whole():
    text = "rotary: vanishes: +3.12 [+1.91, +4.32]* at 1000, +0.73 [−0.79, +2.24] at 8000; 38.48 ± 0.24 BLEU"
    for width in range(8, 60):
        lines = wrap(text, width)
        assert " ".join(lines) == text
        for whole in ("[+1.91, +4.32]*", "[−0.79, +2.24]", "38.48 ± 0.24", "vanishes:"):
            assert any(whole in line for line in lines), (width, lines)


def test_fit_leaves_out_the_least_needed_columns_and_never_cuts_a_cell():
    """Unlisted columns go first (the rightmost first), then the listed from the end, and one left out that fits in
    the room left comes back (valid loss at 60); the kept wrap their free text at its spaces before they go, and
    where even that does not fit, they go too, all but the first."""
    from rich.console import Console

    columns = ["run", "differs", "ΔBLEU", "verdict", "valid loss"]
    rows = [["learned", "positions=learned", "−2.43 [−3.50, −1.36]*", "undecided (1 seed)", "1.819"]]
    expected = {90: [], 60: ["differs"], 45: ["differs", "valid loss"],
                30: ["differs", "verdict", "valid loss"],
                12: ["differs", "ΔBLEU", "verdict", "valid loss"]}  # fmt: skip
    for width, dropped in expected.items():
        table, left = fit(columns, rows, width, priority=["run", "ΔBLEU", "verdict"], keep=3, wraps=["verdict"])
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(table)
        text = out.getvalue()
        assert left == dropped and max(map(len, text.splitlines())) <= width, (width, left, text)
        assert "learned" in text and ("ΔBLEU" in left or "−2.43 [−3.50, −1.36]*" in text), (width, text)
        assert "verdict" in left or "undecided (1 seed)" in text or (width < 50 and "undecided" in text), text
