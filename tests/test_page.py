"""report/index.html and the tables that explain each row: BLEU by source length, the optional columns.

Run directories are written by hand (tests/test_plots.py's `synthetic_results`), then `ablate report`
runs as a user types it; every expected number is recomputed here from the files.
"""

import csv
import io
import json
import math
import statistics
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser

import pytest

from tests.conftest import ROOT, cli
from tests.test_plots import BUCKETS, DIAGNOSED, RUNS, SPLIT, report, synthetic_results

VOID = {"meta", "br", "hr", "img", "input", "link"}  # HTML elements without an end tag


class Page(HTMLParser):
    """What the checks need of a page: the rows of each table, headings, inline SVGs, ids, unclosed tags."""

    def __init__(self, text: str):
        super().__init__()
        self.open, self.tables, self.headings, self.svgs, self.ids, self.refs = [], [], [], 0, [], []
        self.in_heading = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.ids += [attributes["id"]] if "id" in attributes else []
        self.refs += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        if tag in VOID:
            return
        self.open.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag == "svg":
            self.svgs += 1
        elif tag in ("h1", "h2", "h3"):
            self.headings.append("")
            self.in_heading = True

    def handle_endtag(self, tag):
        if tag not in VOID:
            assert self.open.pop() == tag, f"</{tag}> closes another element"
        self.in_heading = self.in_heading and tag not in ("h1", "h2", "h3")

    def handle_data(self, data):
        if self.open and self.open[-1] in ("td", "th"):
            self.tables[-1][-1].append(data)
        elif self.in_heading:
            self.headings[-1] += data


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    experiment = synthetic_results(tmp_path_factory.mktemp("page"))
    report(experiment)
    return experiment


def results_of(experiment) -> dict[str, list[dict]]:
    return {run: [json.loads(p.read_text()) for p in sorted((experiment / "runs" / run).glob("seed-*/result.json"))]
            for run in RUNS}  # fmt: skip


def diagnostics_of(experiment, run: str) -> list[list[dict]]:
    return [[json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted((experiment / "runs" / run).glob("seed-*/diagnostics.jsonl"))]  # fmt: skip


def mean_bleu(results: list[dict], bucket: str | None = None) -> float:
    scores = [r["scores"][SPLIT] for r in results]
    return round(statistics.fmean(s["by_length"][bucket]["bleu"] if bucket else s["bleu"] for s in scores), 2)


def test_index_html_is_one_self_contained_page_with_a_row_per_run_and_every_plot_inline(results):
    folder = results / "report"
    page = Page((folder / "index.html").read_text(encoding="utf-8"))
    assert not page.open  # every element closed
    comparison = page.tables[0]
    assert comparison[0][:4] == ["run", "differs", "BLEU", "n"] and len(comparison[0]) <= 12  # the main columns
    assert sorted(row[0] for row in comparison[1:]) == sorted(RUNS)
    svgs = sorted(folder.glob("*.svg"))
    assert len(svgs) == 7 and page.svgs == len(svgs)
    assert all(ref.startswith("#") for ref in page.refs)  # links inside the page only: nothing fetched
    assert [i for i, n in Counter(page.ids).items() if n > 1] == []  # the inlined plots share no id
    text = (folder / "index.html").read_text(encoding="utf-8")
    assert "<script" not in text and "<?xml" not in text and "<!DOCTYPE svg" not in text and "<metadata" not in text
    for plot in svgs:
        assert f'<figure id="{plot.stem}">' in text, plot.name


def test_index_html_holds_the_length_table_and_every_run_card(results):
    page = Page((results / "report" / "index.html").read_text(encoding="utf-8"))
    length = next(t for t in page.tables if t[0][-1] == "BLEU 31+")
    assert sorted(row[0] for row in length[1:]) == sorted(RUNS)
    cards = (results / "report" / "cards.md").read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip().replace("`", "") for line in cards.splitlines() if line.startswith("#")]
    assert len(headings) == 1 + len(RUNS)
    for heading in headings:
        assert heading in page.headings, heading


def test_length_table_has_a_column_a_bucket_and_the_mean_bleu_of_each_run(results):
    expected = results_of(results)
    md = (results / "report" / "length.md").read_text(encoding="utf-8")
    header, _, *rows = [line for line in md.splitlines() if line.startswith("|")]
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns == ["run", "n", "BLEU", *(f"BLEU {b}" for b in BUCKETS)]
    cells = {row.split("|")[1].strip(): [c.strip() for c in row.strip("|").split("|")] for row in rows}
    assert sorted(cells) == sorted(RUNS)
    for run in DIAGNOSED:
        for i, bucket in enumerate(BUCKETS, start=3):
            assert cells[run][i] == f"{mean_bleu(expected[run], bucket):.2f}", (run, bucket)
    assert cells["plain"][3:] == ["-"] * len(BUCKETS)  # no buckets measured: no numbers
    table = {r["run"]: r for r in csv.DictReader(io.StringIO((results / "report" / "length.csv").read_text()))}
    assert float(table["pre_ln"]["BLEU 31+"]) == mean_bleu(expected["pre_ln"], "31+")
    assert "Sentences: 1-10 412" in md


def test_optional_columns_are_shown_when_asked_for_with_the_values_of_the_files(results):
    default = (results / "report" / "table.md").read_text(encoding="utf-8")
    assert "entropy end" not in default and "BLEU 31+" not in default and "grad norm init" not in default
    text = cli("report", str(results), "--significance", "none", "--no-files", "--format", "csv",
               "--columns", "BLEU,entropy end,BLEU 31+,grad norm init,max logit end,logits norm end")  # fmt: skip
    assert text.returncode == 0, text.stderr
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(text.stdout))}
    assert list(rows["baseline"]) == ["experiment", "run", "BLEU", "entropy end", "BLEU 31+", "grad norm init",
                                      "max logit end", "logits norm end", "view"]  # fmt: skip
    assert rows["baseline"]["view"].startswith("view: no significance test")  # a view says so, in a csv too
    expected = results_of(results)
    for run in RUNS:
        assert float(rows[run]["BLEU"]) == mean_bleu(expected[run])
    for run in DIAGNOSED:
        seeds = diagnostics_of(results, run)
        last = [s[-1] for s in seeds]
        entropy = statistics.fmean(
            statistics.fmean(h for heads in r["attention_entropy"].values() for h in heads) for r in last
        )
        grad = statistics.fmean(math.sqrt(sum(v * v for v in s[0]["grad_norm"].values())) for s in seeds)
        assert float(rows[run]["entropy end"]) == round(entropy, 3)
        assert float(rows[run]["BLEU 31+"]) == mean_bleu(expected[run], "31+")
        assert float(rows[run]["grad norm init"]) == pytest.approx(grad, rel=5e-3)
        logit = statistics.fmean(max(r["max_logit"].values()) for r in last)
        assert float(rows[run]["max logit end"]) == round(logit, 2)
        assert float(rows[run]["logits norm end"]) == round(statistics.fmean(r["logits_norm"] for r in last), 2)
    assert rows["plain"]["entropy end"] == "" and rows["plain"]["BLEU 31+"] == ""  # nothing measured
    by_long = cli("report", str(results), "--significance", "none", "--no-files", "--format", "csv",
                  "--sort", "BLEU 31+")  # fmt: skip
    ranked = [r["run"] for r in csv.DictReader(io.StringIO(by_long.stdout))]
    best = sorted(DIAGNOSED, key=lambda run: -mean_bleu(expected[run], "31+"))
    assert ranked == [*best, "plain"]  # best first, no number last
    md = cli("report", str(results), "--significance", "none", "--no-files", "--format", "md",
             "--columns", "BLEU,entropy end,BLEU 31+")  # fmt: skip
    header, rule = [line for line in md.stdout.splitlines() if line.startswith("|")][:2]
    assert header == "| run | BLEU | entropy end | BLEU 31+ |" and rule == "|---|--:|--:|--:|"  # numbers right-aligned


def test_an_unknown_column_is_one_line_naming_the_optional_ones(results):
    bad = cli("report", str(results), "--significance", "none", "--no-files", "--columns", "entropy start")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("--columns/--sort: no column 'entropy start'; did you mean 'entropy end'?")
    for column in ["grad norm init", "max logit end", "logits norm end", "BLEU 1-10", "BLEU 31+", "status"]:
        assert column in line, column


def test_without_matplotlib_the_page_still_has_the_tables_and_cards(tmp_path):
    experiment = synthetic_results(tmp_path)
    code = ("import sys; sys.modules['matplotlib'] = None; from ablate.cli import main; "
            f"sys.exit(main(['report', {str(experiment)!r}]))")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "plots: not drawn, matplotlib (a dependency of ablate) is missing" in run.stdout
    folder = experiment / "report"
    assert not list(folder.glob("*.svg")) and not list(folder.glob("*.png"))
    text = (folder / "index.html").read_text(encoding="utf-8")
    page = Page(text)
    assert page.svgs == 0 and "No plots: matplotlib is not installed." in text
    assert sorted(row[0] for row in page.tables[0][1:]) == sorted(RUNS)
    assert "baseline" in page.headings and "pre_ln (model.norm_placement)" in page.headings


def test_an_empty_length_bucket_has_no_score_and_the_rest_keep_theirs(tmp_path):
    """A bucket no test sentence falls in (by_length's `bleu: None`) is a dash, not a failure of the report."""
    from ablate.report.breakdown import length_frame
    from ablate.report.results import load_results

    experiment = synthetic_results(tmp_path)
    for path in experiment.glob("runs/*/seed-*/result.json"):
        result = json.loads(path.read_text())
        buckets = result["scores"][SPLIT].get("by_length")
        if buckets:
            buckets["31+"] = {"sentences": 0, "bleu": None, "chrf": None}
            path.write_text(json.dumps(result))
    frame, _ = length_frame(load_results(experiment))
    rows = {r["run"]: r for r in frame.to_dict("records")}
    assert rows["baseline"]["BLEU 31+"] is None and rows["baseline"]["BLEU 1-10"] is not None
    report(experiment)  # exits 0
    assert "BLEU 31+" in (experiment / "report" / "length.md").read_text()


def opening(text: str) -> list[str]:
    """What a page shows first, in its order: the summary, the forest plot, the comparison, then collapsed sections."""
    marks = {'id="summary"': "summary", '<figure id="forest">': "forest", 'id="comparison"': "comparison",
             "<details": "details"}  # fmt: skip
    found = sorted((text.find(mark), name) for mark, name in marks.items() if mark in text)
    return [name for _, name in found]


def test_the_page_opens_with_the_summary_then_the_table_with_a_short_legend_and_collapses_the_rest(results):
    text = (results / "report" / "index.html").read_text(encoding="utf-8")
    assert opening(text) == ["summary", "comparison", "details"]  # no interval here: no forest plot
    legend = text[text.index('<ul class="legend">') : text.index("</ul>", text.index('<ul class="legend">'))]
    assert 1 <= legend.count("<li>") <= 5
    head = text[: text.index("<details")]
    assert "<h2>Plots</h2>" not in head and '<figure id="curves">' not in head and "## baseline" not in head


# Every committed page (results/<experiment>/report/index.html)
PAGES = sorted(p.parent.parent.name for p in (ROOT / "results").glob("*/report/index.html"))


@pytest.mark.parametrize("name", PAGES)
def test_every_committed_page_shows_the_summary_the_forest_plot_and_the_verdicts_first(name):
    """At 1,400×900 a reader sees these before scrolling (docs/reports.md); the HTML holds their order, and the
    verdicts, the comparison's column, before anything collapsed."""
    text = (ROOT / "results" / name / "report" / "index.html").read_text(encoding="utf-8")
    page = Page(text)
    forest = '<figure id="forest">' in text
    assert opening(text) == ["summary", *(["forest"] if forest else []), "comparison", "details"], name
    comparison = page.tables[0]
    assert forest == ("verdict" in comparison[0]), name  # a row with an interval: its verdict in the table and plot
