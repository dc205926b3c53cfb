"""The forest plot draws the report's own rows: each interval, the margin, the verdict; a panel a budget point."""

import pandas as pd

from ablate.report.forest import CAPTION, forest_plot, panels, rows_of


def frame():
    return pd.DataFrame([
        {"run": "baseline", "ΔBLEU": None, "ΔBLEU lo": None, "ΔBLEU hi": None, "verdict": None},
        {"run": "a", "ΔBLEU": -2.0, "ΔBLEU lo": -3.0, "ΔBLEU hi": -1.0, "verdict": "worse"},
        {"run": "b", "ΔBLEU": 0.1, "ΔBLEU lo": -0.5, "ΔBLEU hi": 0.7, "verdict": "equivalent"},
        {"run": "c", "ΔBLEU": 1.5, "ΔBLEU lo": 1.0, "ΔBLEU hi": 2.0, "verdict": "undecided (1 seed)"},
    ], dtype=object)  # fmt: skip


def test_rows_are_the_tables_rows_with_an_interval():
    rows = rows_of(frame())
    assert [(r.run, r.delta, r.low, r.high, r.verdict) for r in rows] == [
        ("a", -2.0, -3.0, -1.0, "worse"), ("b", 0.1, -0.5, 0.7, "equivalent"),
        ("c", 1.5, 1.0, 2.0, "undecided (1 seed)")]  # fmt: skip
    assert [title for title, _ in panels(frame(), None)] == ["the comparison"]


def test_the_plot_is_written_as_png_and_svg_with_every_row_and_verdict(tmp_path):
    written = forest_plot("e", frame(), 1.0, None, tmp_path)
    assert sorted(p.name for p in written) == ["forest.png", "forest.svg"]
    svg = (tmp_path / "forest.svg").read_text()
    for text in ("worse", "equivalent", "undecided (1 seed)", "margin ±1 BLEU", "the comparison"):
        assert text in svg
    assert "margin" in CAPTION and "one seed" in CAPTION


def test_the_same_plot_is_the_same_svg_whatever_a_process_drew_before(tmp_path):
    """No churn in git: the SVG's ids are salted at saving, also when the forest is a process's first plot (it
    was drawn with matplotlib's random salt when no other plot had set one)."""
    import matplotlib.pyplot as plt

    svgs = []
    for name in ("one", "two"):
        plt.rcParams["svg.hashsalt"] = None  # matplotlib's default: a random salt a figure
        (tmp_path / name).mkdir()
        forest_plot("e", frame(), 1.0, None, tmp_path / name)
        svgs.append((tmp_path / name / "forest.svg").read_bytes())
    assert svgs[0] == svgs[1] and b'clip-path="url(#' in svgs[0]


def test_no_interval_no_plot(tmp_path):
    empty = frame().iloc[:1]
    assert forest_plot("e", empty, 1.0, None, tmp_path) == [] and not list(tmp_path.iterdir())


def test_a_row_beyond_the_axis_is_an_arrow_with_its_value(tmp_path):
    forest_plot("e", frame(), 1.0, None, tmp_path, xlim=(-0.9, 2.5))
    svg = (tmp_path / "forest.svg").read_text()
    assert "−2.00 [−3.00, −1.00] worse" in svg  # a: left of −0.9


def test_the_comparison_is_drawn_across_the_top_and_each_budget_point_a_small_panel_under_it(tmp_path):
    """The page shows the forest plot at full width: the comparison above, its budget points in a row under it."""
    import re

    from ablate.report.budgets import Budgets

    rows = frame()
    at = pd.concat([rows.assign(budget=str(b)) for b in (100, 200)], ignore_index=True)
    budgets = Budgets([100.0, 200.0], "steps", at, [], pd.DataFrame(), [], {}, {})
    assert [title for title, _ in panels(rows, budgets)] == ["the comparison", "at 100 steps", "at 200 steps"]
    forest_plot("e", rows, 1.0, budgets, tmp_path, view="view: margin ±3, not the declared ±1")
    svg = (tmp_path / "forest.svg").read_text()
    width, height = (float(v) for v in re.search(r'width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    assert width > height  # across the page

    def y(text: str) -> float:  # where a title is drawn (svg.fonttype none: text as text, at its x and y)
        return float(re.search(rf' y="([\d.]+)"[^>]*>{re.escape(text)}<', svg).group(1))

    assert y("the comparison") < y("at 100 steps") == y("at 200 steps")
    assert "view: margin ±3, not the declared ±1" in svg
