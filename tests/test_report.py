"""`ablate report` on a results directory made by a real short run: every format, significance, cards, plots."""

import csv
import io
import json
import random
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from ablate.config import flatten
from ablate.report.frame import report_frame
from ablate.report.paper import PAPER_BASE, paper_differences, value_at
from ablate.report.results import load_results
from ablate.report.significance import paired_test
from tests.conftest import ROOT, cli

SPLIT = "test_2017_mscoco"  # smoke's test set


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """smoke's baseline and pre_ln with 2 seeds each, and a variant that diverges."""
    root = tmp_path_factory.mktemp("report")
    spec = root / "e.yaml"
    spec.write_text(f"""
name: rep
extends: {ROOT / "experiments" / "smoke.yaml"}
training: {{max_steps: 60, validate_every: 30}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
variants:
  pre_ln: {{model.norm_placement: pre_ln}}
  explodes: {{training.schedule: {{name: constant, lr: 1.0e+4}}}}
""")  # fmt: skip
    run = cli("run", str(spec), "--seeds", "2", "--results", str(root / "results"))
    assert run.returncode == 0, run.stderr
    return root / "results" / "rep"


def report(results, *args):
    run = cli("report", str(results), *args)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def written(results) -> str:
    """`ablate report` with its files (tables, cards, plots, index.html) written once: what it printed."""
    return report(results)


def test_markdown_has_the_main_columns_a_legend_mean_and_std_and_no_numbers_for_a_diverged_run(results):
    """md (as LaTeX and html) shows at most 12 columns, with a legend of their units; the csv keeps every one."""
    text = report(results, "--format", "md", "--no-files")
    header, _, *rows = [line for line in text.splitlines() if line.startswith("|")]
    columns = [c.strip("| ") for c in header.split(" | ")]
    assert columns == ["run", "differs", "BLEU", "n", "ΔBLEU", "verdict", "valid loss", "train tok/s",
                       "tok/s vs baseline", "peak MiB", "status"]  # fmt: skip
    assert "Legend: BLEU is the mean over the run's n seeds ± their standard deviation" in text
    assert "nats a target token" in text and "peak resident memory" in text
    every = next(csv.reader(io.StringIO(report(results, "--format", "csv", "--no-files"))))
    for column in ["p", "chrF", "len ratio", "valid ppl", "decode sent/s", "wall s", "device"]:
        assert column in every and column not in columns
    cells = {row.split(" | ")[0].strip("| "): row.split(" | ") for row in rows}
    assert re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", cells["baseline"][2])
    assert cells["explodes"][2] == "-" and cells["explodes"][-1].strip(" |") == "diverged"
    assert "nrefs:1|case:mixed" in text


def test_csv_numbers_match_the_result_files(results):
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(report(results, "--format", "csv", "--no-files")))}
    exp = load_results(results)
    for run in ("baseline", "pre_ln"):
        bleu = [j.result.bleu(SPLIT) for j in exp.runs[run]]
        assert len(bleu) == 2 and float(rows[run]["BLEU"]) == pytest.approx(sum(bleu) / 2, abs=0.006)
        assert rows[run]["n"] == "2" and rows[run]["experiment"] == "rep"
    delta = float(rows["pre_ln"]["BLEU"]) - float(rows["baseline"]["BLEU"])
    assert float(rows["pre_ln"]["ΔBLEU"]) == pytest.approx(delta, abs=0.011)
    assert rows["explodes"]["BLEU"] == "" and rows["explodes"]["status"] == "diverged"
    assert float(rows["baseline"]["tok/s vs baseline"]) == 1.0


def test_latex_is_a_booktabs_table_body(results):
    tex = report(results, "--format", "latex", "--no-files")
    body = [line for line in tex.splitlines() if not line.startswith("%")]
    assert body[0].startswith(r"\begin{tabular}{") and body[-1] == r"\end{tabular}"
    assert body[1] == r"\toprule" and body[3] == r"\midrule" and body[-2] == r"\bottomrule"
    columns = len(re.match(r"\\begin\{tabular\}\{(\w+)\}", body[0]).group(1))
    for line in [body[2], *body[4:-2]]:
        assert line.endswith(r" \\")
        cells = line[: -len(r" \\")].split(" & ")
        assert len(cells) == columns, line
        for c in cells:
            assert c.count("$") % 2 == 0 and c.count("{") == c.count("}"), c
            assert not re.search(r"(?<!\\)[_%#&]|[±×Δ−]", c), c  # escaped, and no bare Unicode symbols
    assert r"$\Delta$BLEU" in body[2] and r"$\pm$" in tex
    if shutil.which("pdflatex"):  # compile it where TeX is installed
        doc = results.parent / "t.tex"
        doc.write_text("\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n" + tex + "\\end{document}\n")
        subprocess.run(["pdflatex", "-interaction=nonstopmode", doc.name], cwd=doc.parent, check=True,
                       capture_output=True)  # fmt: skip


def test_html_is_one_table_with_a_row_per_run_its_text_columns_of_class_text(results):
    """Every tag closed, a row a run; the text columns (run, differs, verdict, status) of class "text", which the
    report's page aligns left as md and LaTeX do, and no number column."""

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.tags, self.text = [], [], []

        def handle_starttag(self, tag, attrs):
            if tag == "br":
                return  # a void element: no end tag
            self.tags.append(tag)
            if tag == "tr":
                self.rows.append([])
            if tag == "th":
                self.text.append(("class", "text") in attrs)

        def handle_data(self, data):
            if self.tags and self.tags[-1] in ("td", "th"):
                self.rows[-1].append(data)

        def handle_endtag(self, tag):
            assert self.tags.pop() == tag

    parser = Cells()
    page = report(results, "--format", "html", "--no-files")
    parser.feed(page)
    assert not parser.tags  # every tag closed
    assert [r[0] for r in parser.rows] == ["run", "baseline", "pre_ln", "explodes"]
    text = [column for column, is_text in zip(parser.rows[0], parser.text, strict=True) if is_text]
    assert text == ["run", "differs", "verdict", "status"], text
    assert page.count('<td class="text">') == 4 * 3  # the 3 rows' text cells alone


def test_terminal_output_and_files_next_to_the_tables(results, written):
    text = written
    assert "ΔBLEU" in text and "baseline" in text and "diverged" in text and "\x1b[" not in text
    folder = results / "report"
    for name in ["table.md", "table.csv", "table.tex", "table.html", "cards.md"]:
        assert (folder / name).is_file(), name
    plots = ["forest", "curves", "bleu", "length", "gradnorm", "entropy", "max_logit", "norms"]  # a real run's files
    for name in [f"{plot}.{suffix}" for plot in plots for suffix in ("png", "svg")] + ["index.html"]:
        assert (folder / name).stat().st_size > 1000, name  # matplotlib is a dependency
    assert "| run | n | BLEU | BLEU 1-10 | BLEU 11-20 | BLEU 21-30 | BLEU 31+ |" in (folder / "length.md").read_text()
    page = (folder / "index.html").read_text()
    assert page.count("<svg") == len(plots) and all(f'<figure id="{plot}">' in page for plot in plots)
    assert all(f'<td class="text">{run}</td>' in page for run in ("baseline", "pre_ln", "explodes"))


def test_columns_and_sort(results):
    text = report(results, "--format", "csv", "--no-files", "--columns", "BLEU,status", "--sort", "BLEU")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["experiment", "run", "BLEU", "status", "view"]  # a view says so in its csv too
    assert rows[0]["view"] == "view: columns BLEU, status; sorted by BLEU"
    bleu = [float(r["BLEU"]) for r in rows if r["BLEU"]]
    assert bleu == sorted(bleu, reverse=True) and rows[-1]["run"] == "explodes"  # no number: last
    bad = cli("report", str(results), "--columns", "BLUE")
    assert bad.returncode == 2 and bad.stderr.startswith("--columns/--sort: no column 'BLUE'; did you mean 'BLEU'?")


def test_report_needs_results_not_torch(results):
    code = ("import sys; from ablate.cli import main; "
            f"main(['report', {str(results)!r}, '--no-files']); assert 'torch' not in sys.modules")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_p_values_come_from_seed_matched_paired_hypotheses(results):
    exp = load_results(results)
    frame, notes = report_frame(exp, "bs")
    p = dict(zip(frame["run"], frame["p"], strict=True))
    assert p["baseline"] is None and p["explodes"] is None
    refs = _references(exp)
    base = [h for j in exp.runs["baseline"] for h in j.hypotheses(SPLIT)]
    pre_ln = [h for j in exp.runs["pre_ln"] for h in j.hypotheses(SPLIT)]
    assert p["pre_ln"] == paired_test(base, {"pre_ln": pre_ln}, refs * 2, lowercase=False)["pre_ln"]
    assert any("paired bootstrap" in n for n in notes)


def _references(exp):
    from ablate.report.results import references

    return references(exp.runs["baseline"][0].config, SPLIT)


def test_paired_test_tells_a_real_difference_from_noise():
    """Two systems of the same quality (different random errors) against one that is clearly better."""
    rng = random.Random(0)
    words = ["the", "a", "cat", "dog", "sat", "stood", "on", "near", "mat", "rug", "red", "blue", "big", "small"]
    refs = [" ".join(rng.choice(words) for _ in range(10)) for _ in range(300)]

    def noisy(sentence, keep):
        return " ".join(w if rng.random() < keep else rng.choice(words) for w in sentence.split())

    a, b, good = [noisy(r, 0.6) for r in refs], [noisy(r, 0.6) for r in refs], [noisy(r, 0.9) for r in refs]
    for test in ("bs", "ar"):
        p = paired_test(a, {"b": b, "good": good, "same": list(a)}, refs, lowercase=False, test=test)
        assert p["b"] > 0.05 and p["good"] < 0.01, (test, p)
        assert p["same"] == 1.0  # sacreBLEU alone gives the baseline against itself 1/(n+1): "significant"
    with pytest.raises(ValueError, match="hypotheses for"):
        paired_test(a, {"short": b[:10]}, refs, lowercase=False)


def test_cards_list_departures_from_the_paper(results, written):
    cards = (results / "report" / "cards.md").read_text()
    baseline = cards.split("## baseline")[1].split("## ")[0]
    assert "- `model.d_model`: 32 (paper: 512, Table 3, base)" in baseline
    assert "norm_placement" not in baseline
    pre_ln = cards.split("## pre_ln")[1].split("## ")[0]
    assert "- `model.norm_placement`: pre_ln (paper: post_ln, §3.1, LayerNorm(x + Sublayer(x)))" in pre_ln
    for seed in (1, 2):  # what each seed cost as it trained, as its result.json says
        r = json.loads((results / "runs" / "baseline" / f"seed-{seed}" / "result.json").read_text())
        (line,) = [line for line in baseline.splitlines() if line.startswith(f"- seed {seed}: ")]
        for figure in (f"{r['status']}; {r['steps']:,} steps, {r['epochs']:.2f} epochs",
                       f"; {r['device']}, {r['precision']};", f"{r['train_tgt_tokens_per_s']:,.0f} target tokens/s",
                       f"{r['step_ms']:,.0f} ms a step", f"peak {r['peak_memory_mib']:,.0f} MiB"):  # fmt: skip
            assert figure in line, (figure, line)


def test_a_card_says_where_a_seed_shared_its_machine_and_where_its_result_came_from():
    from ablate.record import RunResult
    from ablate.report.cards import cost, duration

    alone = RunResult(run="a", seed=1, status="completed", steps=8000, epochs=13.49, wall_seconds=8457.5,
                      device="AMD EPYC (AVX2, emulated bf16), 1 thread", precision="bf16",
                      train_tgt_tokens_per_s=808.4, step_ms=993.9, peak_memory_mib=843.5, core_share=0.95)  # fmt: skip
    assert cost(alone) == ("completed; 8,000 steps, 13.49 epochs, 2 h 21 min of wall time; AMD EPYC (AVX2, emulated "
                           "bf16), 1 thread, bf16; 808 target tokens/s, 994 ms a step, peak 844 MiB")  # fmt: skip
    busy = alone.model_copy(update={"core_share": 0.804, "runs_per_gpu": 4, "slurm_restarts": 2, "processes": 2,
                                    "reused_from": "pe/runs/baseline/seed-1"})  # fmt: skip
    said = cost(busy)
    for part in ("bf16, 2 processes;", "other processes took 20% of its cores' time", "its GPU shared by up to 4 runs",
                 "requeued 2 time(s) by Slurm", "the result of pe/runs/baseline/seed-1, reused"):  # fmt: skip
        assert part in said, (part, said)
    assert cost(RunResult(run="a", seed=1, status="failed")) == "failed"
    assert [duration(s) for s in (58.4, 840, 3599, 3600, 8457.5)] == ["58 s", "14 min", "1 h 00 min", "1 h 00 min",
                                                                      "2 h 21 min"]  # fmt: skip


def test_the_paper_base_is_what_the_spec_defaults_and_paper_recipe_say():
    from ablate.sweep.experiment import load_experiment

    config = load_experiment(ROOT / "experiments" / "paper" / "base.yaml").baseline.spec.model_dump(mode="json")
    assert paper_differences(config) == []
    assert set(PAPER_BASE) <= set(flatten(config))  # every key is one the spec has, and set but d_v (null: d_k)
    assert [key for key in PAPER_BASE if value_at(config, key) is None] == ["model.d_v"]
    del config["model"]["projection"]  # a run made before the projection slot: it had the default, `full`
    del config["model"]["d_v"]  # a run made before d_v: it was d_k
    assert paper_differences(config) == []
    config["model"]["projection"] = "shared_per_head"
    assert [d[:3] for d in paper_differences(config)] == [("model.projection", "full", "shared_per_head")]
    config["model"] |= {"projection": "full", "d_k": 16}  # d_v follows d_k
    assert [d[:3] for d in paper_differences(config)] == [("model.d_k", "64", "16"), ("model.d_v", "64", "16")]
    config["model"]["d_v"] = 64  # the paper's row B
    assert [d[:3] for d in paper_differences(config)] == [("model.d_k", "64", "16")]


def test_delta_bleu_intervals_cover_seeds_and_sentences(results):
    import numpy as np

    from ablate.report.significance import bleu_statistics, corpus_bleu, delta_interval, pooled_sd, seeds_needed

    exp = load_results(results)
    refs = _references(exp)

    def stats(run):
        return np.stack([bleu_statistics(j.hypotheses(SPLIT), refs, False) for j in exp.runs[run]])

    expected = delta_interval(stats("baseline"), stats("pre_ln"), corpus_bleu)
    table = {r["run"]: r for r in csv.DictReader(io.StringIO(report(results, "--format", "csv", "--no-files")))}
    row = table["pre_ln"]
    assert row["CI over"] == "seeds, sentences" and expected.seeds
    assert float(row["ΔBLEU lo"]) == pytest.approx(expected.low, abs=0.006)
    assert float(row["ΔBLEU hi"]) == pytest.approx(expected.high, abs=0.006)
    assert float(row["ΔBLEU lo"]) <= float(row["ΔBLEU"]) <= float(row["ΔBLEU hi"])
    assert table["explodes"]["ΔBLEU lo"] == "" and table["baseline"]["CI over"] == ""
    md = report(results, "--format", "md", "--no-files")
    assert "Student's t" in md and "test-set sampling" in md and "seed-to-seed variance is not covered" not in md
    line = next(line for line in md.splitlines() if line.startswith("| pre_ln "))
    assert f"[{float(row['ΔBLEU lo']):+.2f}".replace("-", "−") in line
    assert ("*" in line) == (expected.low > 0 or expected.high < 0)
    # an unresolved row says how many seeds a t-test would need at the measured size and spread
    if expected.low <= 0 <= expected.high:
        bleu = {run: [j.result.bleu(SPLIT) for j in exp.runs[run]] for run in ("baseline", "pre_ln")}
        spread = pooled_sd(bleu["pre_ln"], bleu["baseline"])
        assert row["seeds for 80%"] == seeds_needed(expected.delta, spread)
    else:
        assert row.get("seeds for 80%", "") == ""


def test_length_ratio_is_each_runs_mean_over_seeds_and_needs_the_statistics_or_the_references(results, tmp_path,
                                                                                              monkeypatch):  # fmt: skip
    from sacrebleu.metrics import BLEU

    exp = load_results(results)
    refs = _references(exp)
    table = {r["run"]: r for r in csv.DictReader(io.StringIO(report(results, "--format", "csv", "--no-files")))}
    for run in ("baseline", "pre_ln"):
        scores = [BLEU().corpus_score(j.hypotheses(SPLIT), [refs]) for j in exp.runs[run]]
        expected = sum(s.sys_len / s.ref_len for s in scores) / len(scores)
        assert float(table[run]["len ratio"]) == pytest.approx(expected, abs=5e-4)
    assert table["explodes"]["len ratio"] == ""
    monkeypatch.setenv("ABLATE_DATA_DIR", str(results / "nowhere"))
    frame, _ = report_frame(load_results(results), "none")  # from the statistics the worker kept
    assert [float(frame.set_index("run").loc[run, "len ratio"]) for run in ("baseline", "pre_ln")] == [
        float(table[run]["len ratio"]) for run in ("baseline", "pre_ln")]  # fmt: skip
    earlier = shutil.copytree(results, tmp_path / "rep", ignore=shutil.ignore_patterns("checkpoints", "*.bleu.json"))
    for test in ("bs", "none"):  # a run scored before they were kept
        frame, notes = report_frame(load_results(earlier), test)
        assert "len ratio" not in frame.columns
        assert any(n.startswith("len ratio") and "not computed" in n and "nowhere" in n for n in notes)


def test_a_note_says_when_rows_trained_on_different_devices_and_their_speeds_are_not_divided(tmp_path):
    from ablate.record import RunResult, Status
    from ablate.report.results import from_records

    def record(run, device):
        return RunResult(run=run, seed=1, status=Status.COMPLETED, device=device, train_src_tokens_per_s=900.0,
                         train_tgt_tokens_per_s=1000.0)  # fmt: skip

    one = [record("baseline", "cpu (x86_64, 2 threads)"), record("pre_ln", "cpu (x86_64, 2 threads)")]
    _, notes = report_frame(from_records("e", tmp_path, one), "none")
    assert not any("different devices" in n for n in notes)
    two = [*one, record("rotary", "cpu (x86_64, 1 threads)")]
    frame, notes = report_frame(from_records("e", tmp_path, two), "none")
    note = next(n for n in notes if "different devices" in n)
    assert note.startswith("The runs trained on 2 different devices (cpu (x86_64, 2 threads); cpu (x86_64, 1 threads))")
    assert list(frame["tok/s vs baseline"]) == [1.0, 1.0, None]  # a ratio only between runs of one machine
    assert any(n.startswith("tok/s vs baseline is – for rotary: its seeds and the baseline's") for n in notes)


def test_verdicts_follow_the_interval_and_the_declared_margin(results, tmp_path):
    """equivalent exactly when the 90% interval (two one-sided tests at 5%) lies inside ±margin; without a margin
    a row is better or worse exactly when its 95% interval excludes 0 (one row judged: Holm is the plain test)."""
    import numpy as np

    from ablate.report.decide import tost
    from ablate.report.significance import bleu_statistics, corpus_bleu, delta_interval

    exp = load_results(results)
    refs = _references(exp)
    stats = {run: np.stack([bleu_statistics(j.hypotheses(SPLIT), refs, False) for j in exp.runs[run]])
             for run in ("baseline", "pre_ln")}  # fmt: skip
    interval = delta_interval(stats["baseline"], stats["pre_ln"], corpus_bleu)
    inner = interval.at(0.90)
    edge = max(-inner.low, inner.high)  # the smallest margin that holds the 90% interval

    def verdict(*args):
        table = {r["run"]: r for r in csv.DictReader(io.StringIO(report(results, "--format", "csv", "--no-files",
                                                                          *args)))}  # fmt: skip
        return table["pre_ln"]["verdict"]

    plain = "better" if interval.low > 0 else "worse" if interval.high < 0 else "undecided"
    assert verdict() == plain
    assert verdict("--margin", f"{edge * 1.02:.6g}") == "equivalent" and tost(interval, edge * 1.02, 0.05)
    assert verdict("--margin", f"{edge * 0.98:.6g}") == plain
    text = report(results, "--format", "md", "--no-files", "--margin", "2.5")
    assert "reject |ΔBLEU| ≥ 2.5 BLEU" in text and "margin 2.5 (a view; declared: none)" in text
    shutil.copytree(results, tmp_path / "rep")  # a margin declared in design.json, as `ablate run` writes it
    (tmp_path / "rep" / "design.json").write_text('{"margin": 2.5, "seeds": [1, 2], "first": 2}')
    assert f"margin 2.5 (declared in {tmp_path / 'rep' / 'design.json'})" in report(tmp_path / "rep", "--format",
                                                                                   "md", "--no-files")  # fmt: skip
    assert "margin 3 (a view; declared: 2.5)" in report(tmp_path / "rep", "--format", "md", "--no-files",
                                                        "--margin", "3")  # fmt: skip


def test_delta_bleu_is_the_difference_of_the_means_rounded_once(tmp_path):
    """heads' converged 2 heads against its baseline: means 38.2967 and 38.5533, ΔBLEU -0.2567. The difference of
    the rounded means (38.30 - 38.55) read -0.25 in the main table, where the budget table's interval said -0.26."""
    from ablate.record import RunResult, Score, Status
    from ablate.report.results import from_records

    def record(run, seed, bleu):
        score = Score(bleu=bleu, chrf=60.0, bleu_signature="-", chrf_signature="-")
        return RunResult(run=run, seed=seed, status=Status.COMPLETED, scores={"test": score})

    runs = [*(record("baseline", s, b) for s, b in zip((1, 2, 3), (38.76, 38.66, 38.24), strict=True)),
            *(record("heads=2", s, b) for s, b in zip((1, 2, 3), (38.41, 38.40, 38.08), strict=True)),
            *(record("same", s, b) for s, b in zip((1, 2, 3), (38.76, 38.66, 38.24), strict=True))]  # fmt: skip
    frame, _ = report_frame(from_records("e", tmp_path, runs), "none")
    rows = frame.set_index("run")
    assert rows.loc["heads=2", "BLEU"] == 38.30 and rows.loc["baseline", "BLEU"] == 38.55
    assert rows.loc["heads=2", "ΔBLEU"] == -0.26
    assert str(rows.loc["same", "ΔBLEU"]) == "0.0"  # not -0.0


def test_a_terminal_table_cuts_no_word_and_leaves_out_columns_before_a_cell_wraps():
    """Every cell on one line; the least needed columns go, named in one line, until the rest fit the console; only
    where run, ΔBLEU and verdict alone do not fit does free text wrap, at its spaces (tests/test_screen.py: the CLI)."""
    import io

    import pandas as pd
    from rich.console import Console

    from ablate.report.tables import print_table

    differs = "norm_placement=pre_ln, positions=learned_absolute, d_k=16"
    row = {"run": "variant", "differs": differs, "BLEU": 38.5, "BLEU std": 0.2, "n": 3, "ΔBLEU": -0.5,
           "ΔBLEU lo": -1.2, "ΔBLEU hi": 0.3, "verdict": "undecided", "valid loss": 1.7, "train tok/s": 2000.0,
           "tok/s vs baseline": 0.95, "peak MiB": 700.0, "status": "completed"}  # fmt: skip
    for width, left in ((160, ""), (120, "valid loss, train tok/s, peak MiB"), (80, "differs")):
        out = io.StringIO()
        print_table(Console(file=out, width=width), "t", pd.DataFrame([row]), [], compact=True)
        text = out.getvalue()
        assert max(len(line) for line in text.splitlines()) <= width, text
        for word in ["variant", "−0.50 [−1.20, +0.30]", "undecided", *([differs] if width > 80 else [])]:
            assert word in text, (width, word, text)  # whole: not folded across lines, not cropped at the edge
        assert (f"Not shown at {width} columns: {left}." in " ".join(text.split())) == bool(left), text
    smoke = {"run": "pre_ln", "differs": "norm_placement=pre_ln", "BLEU": 0.22, "n": 1, "ΔBLEU": 0.0,
             "ΔBLEU lo": -0.13, "ΔBLEU hi": 0.11, "verdict": "undecided (1 seed)", "valid loss": 4.884,
             "train tok/s": 73919.0, "peak MiB": 308.2, "status": "completed"}  # fmt: skip
    out = io.StringIO()
    print_table(Console(file=out, width=42), "t", pd.DataFrame([smoke | {"run": "baseline"}, smoke]), [], True)
    text = out.getvalue()
    assert "+0.00 [−0.13, +0.11]" in text and "undecided" in text and "(1 seed)" in text, text


def test_every_seed_table_gives_each_seed_its_mean_and_t_interval_and_earlier_decodings_beside_them(tmp_path):
    """report/seeds.md: a row a run, decoding, split and score, every seed's value, the mean ± sd and the mean's 95%
    interval (t with n − 1 df: scipy.stats, not the report's own t). An earlier result kept beside a job is a row of
    its own when it differs from the job only in its decoding; one that trained otherwise, or a set-aside cut short
    (.partial), is not. A run with no earlier decoding has no decoding column."""
    import statistics

    import pandas as pd
    from scipy.stats import t

    from ablate.record import RunResult, Score, Status
    from ablate.report.seeds import seeds_frame
    from ablate.report.tables import to_markdown

    def job(name, seed, spec, bleu):
        d = tmp_path / "e" / "runs" / "baseline" / name
        d.mkdir(parents=True)
        scores = {split: Score(bleu=b, cased_bleu=b - 0.4, chrf=60.0 + b / 10, bleu_signature=f"case:lc {split}",
                               chrf_signature="-") for split, b in bleu.items()}  # fmt: skip
        result = RunResult(experiment="e", run="baseline", seed=seed, status=Status.COMPLETED, scores=scores)
        (d / "result.json").write_text(result.model_dump_json())
        (d / "job.json").write_text(json.dumps({"spec": spec}))
        (d / "config.yaml").write_text(json.dumps(spec))  # JSON is YAML

    def spec(form, alpha, dropout=0.3):
        return {"model": {"dropout": dropout}, "evaluation": {"length_penalty_form": form, "length_penalty": alpha}}

    fairseq, gnmt = spec("fairseq", 1.0), spec("gnmt", 0.6)
    scored = {1: (40.13, 39.02), 2: (39.57, 38.11), 3: (40.71, 39.40)}  # seed -> test2016, test2017
    for seed, (a, b) in scored.items():
        job(f"seed-{seed}", seed, fairseq, {"test_2016_flickr": a, "test_2017_flickr": b})
    job("seed-1.stale-aaaaaaaaaaaa", 1, gnmt, {"test_2016_flickr": 39.51, "test_2017_flickr": 38.50})
    job("seed-2.stale-bbbbbbbbbbbb", 2, gnmt, {"test_2016_flickr": 38.94, "test_2017_flickr": 37.72})
    job("seed-3.stale-cccccccccccc", 3, spec("gnmt", 0.6, dropout=0.1), {"test_2016_flickr": 10.0})  # trained else
    job("seed-3.stale-dddddddddddd.partial", 3, gnmt, {"test_2016_flickr": 11.0})  # cut short: not a result
    frame, notes = seeds_frame(load_results(tmp_path / "e"))
    rows = {(r["decoding"], r["split"], r["score"]): r for r in frame.to_dict("records")}
    now, before = "length_penalty 1.0; length_penalty_form fairseq", "length_penalty 0.6; length_penalty_form gnmt"
    assert set(rows) == {
        (d, s, score)
        for d in (now, before + " (set aside)")
        for s in ("test_2016_flickr", "test_2017_flickr")
        for score in ("BLEU", "cased BLEU", "chrF")
    }
    for decoding, split, score, expected in [
        (now, "test_2016_flickr", "BLEU", {1: 40.13, 2: 39.57, 3: 40.71}),
        (now, "test_2017_flickr", "cased BLEU", {1: 38.62, 2: 37.71, 3: 39.0}),
        (before + " (set aside)", "test_2016_flickr", "BLEU", {1: 39.51, 2: 38.94}),
    ]:
        row, values = rows[(decoding, split, score)], list(expected.values())
        assert {s: row[f"seed {s}"] for s in expected} == pytest.approx(expected)
        assert row["n"] == len(values)
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        low, high = t.interval(0.95, len(values) - 1, loc=mean, scale=sd / len(values) ** 0.5)
        assert (row["mean"], row["sd"], row["95% lo"], row["95% hi"]) == pytest.approx(
            (round(mean, 2), round(sd, 2), round(low, 2), round(high, 2)))  # fmt: skip
    assert pd.isna(rows[(before + " (set aside)", "test_2016_flickr", "BLEU")]["seed 3"])  # its copy trained else
    lines = [
        r for r in to_markdown(frame).splitlines() if r.startswith(f"| baseline | {now} | test_2016_flickr | BLEU")
    ]
    assert lines == [
        f"| baseline | {now} | test_2016_flickr | BLEU | 40.13 | 39.57 | 40.71 | 3 | 40.14 ± 0.57 [38.72, 41.55] |"
    ]
    assert "BLEU on test_2017_flickr: case:lc test_2017_flickr" in notes
    shutil.rmtree(tmp_path / "e" / "runs" / "baseline" / "seed-1.stale-aaaaaaaaaaaa")
    shutil.rmtree(tmp_path / "e" / "runs" / "baseline" / "seed-2.stale-bbbbbbbbbbbb")
    frame, _ = seeds_frame(load_results(tmp_path / "e"))
    assert "decoding" not in frame.columns and len(frame) == 6
