"""The committed evidence (issue 14, results/README.md) is complete, and is what the experiment files describe.

A change to experiments/base.yaml, or to a default that enters the config hash, makes every committed run
stale; these tests say so, rather than the README quoting results that `ablate run` would train again.
"""

import re

import pytest

from ablate.sweep.experiment import load_experiment
from ablate.sweep.plan import Action, plan
from tests.conftest import ROOT, cli

# Each experiment file of the evidence and the seeds asked of it at least: issue 14's at 1,000 steps (short/, length
# and width) and issue 38's at convergence.
SEEDS = {"short/pe": 3, "short/scaling": 3, "short/tutorial": 3, "short/norm": 2, "short/heads": 2, "length": 2,
         "short/table3": 1, "width": 1, "paper/transformer_tiny_4096": 3, "paper/transformer_tiny": 3}  # fmt: skip


@pytest.mark.parametrize("name", SEEDS)
def test_every_job_is_committed_finished_under_its_current_spec(name):
    experiment = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    planned = plan(experiment, ROOT / "results")
    assert {p.job.seed for p in planned} >= set(range(1, SEEDS[name] + 1))
    to_train = [f"{p.job.label}: {p.action} {p.detail}".strip() for p in planned if p.action != Action.SKIP]
    assert not to_train, f"results/{experiment.name} is incomplete or stale: {to_train}"


# The evidence at convergence (issue 38), committed run by run as its sweep lands, and the runs it had at least.
CONVERGED = {"pe": 12, "scaling": 12, "tutorial": 15, "norm": 12, "heads": 12, "table3": 17}


@pytest.mark.parametrize("name", CONVERGED)
def test_every_committed_run_at_convergence_stands_under_its_current_spec(name):
    """While the sweep is incomplete: a committed result that `ablate run` would set aside and train again (a
    changed default, a renamed key) is found here, not after hours of a session."""
    experiment = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    committed = [p for p in plan(experiment, ROOT / "results") if (p.job.directory / "result.json").is_file()]
    assert len(committed) >= CONVERGED[name]
    stale = [f"{p.job.label}: {p.action} {p.detail}".strip() for p in committed if p.action != Action.SKIP]
    assert not stale, f"results/{experiment.name}: committed runs that would train again: {stale}"


def test_the_report_of_the_evidence_runs_and_sets_table3_beside_the_paper():
    # At 120 columns the row column shows (it is the first left out of a narrower one); CI's pipe may set less.
    report = cli("report", str(ROOT / "results" / "table3-short"), "--no-files", env={"COLUMNS": "120"})
    assert report.returncode == 0, report.stderr
    assert "table3-short: against the paper (Vaswani et al. 2017, Table 3)" in report.stdout
    rows = {"heads=1": "A", "d_k=16": "B", "layers=2": "C", "d_model=512": "C", "d_ff=1024": "C", "dropout=0": "D",
            "label_smoothing=0.2": "D", "positions=learned": "E"}  # fmt: skip
    for run, row in rows.items():
        assert re.search(rf"(?m)^{re.escape(run)} +{row} ", report.stdout), run  # a row of the table: run, then row


def test_every_reused_result_names_a_committed_run_with_its_spec_and_seed():
    """A copied result says where it came from (reused_from); that run must exist under results/ with the same
    config hash and seed, also after experiments are renamed (the short evidence became <name>-short)."""
    import json

    checked = 0
    for path in (ROOT / "results").glob("*/runs/*/seed-*/result.json"):
        result = json.loads(path.read_text())
        if not result.get("reused_from"):
            continue
        source = ROOT / "results" / result["reused_from"] / "result.json"
        assert source.is_file(), f"{path}: reused_from {result['reused_from']} is not a committed run"
        origin = json.loads(source.read_text())
        assert (origin["config_hash"], origin["seed"]) == (result["config_hash"], result["seed"]), path
        checked += 1
    assert checked > 20  # the committed evidence shares its baselines


REPORTED = sorted(p.parent.parent.name for p in (ROOT / "results").glob("*/report/index.html"))


def test_every_experiment_under_results_has_its_report_with_a_forest_plot():
    """Every experiment with a summary has its report committed; every one with a row to compare (more than a
    baseline) has the forest plot on its page."""
    experiments = sorted(p.parent.name for p in (ROOT / "results").glob("*/summary.csv"))
    assert experiments and experiments == REPORTED
    for name in REPORTED:
        page = (ROOT / "results" / name / "report" / "index.html").read_text(encoding="utf-8")
        rows = (ROOT / "results" / name / "summary.csv").read_text(encoding="utf-8").count("\n") - 1
        assert ('<figure id="forest">' in page) == (rows > 1), name


@pytest.mark.parametrize("name", ["pe", "scaling", "tutorial", "norm", "heads", "table3"])
def test_the_committed_report_is_what_ablate_report_writes_today(name):
    """The committed comparison table cannot drift from the runs, the design or the bench: `ablate report` prints it
    again, byte for byte, from the committed results (read only: the table as `--format md` prints it is the
    report's table.md)."""
    done = cli("report", f"results/{name}", "--format", "md", "--no-files", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (ROOT / "results" / name / "report" / "table.md").read_text(encoding="utf-8")


def test_a_budget_verdict_line_shows_the_table_s_own_figures():
    """One rounding rule: the line under the budgets table reads each ΔBLEU as the table's cell does (the mean
    difference rounded once), not the interval's centre, which can differ by 0.01 (pe's none: −9.53 in the table)."""
    from pathlib import Path

    from ablate.report.build import build

    budgets = build(Path("results/pe")).budgets
    assert budgets is not None
    cells = {(r["run"], r["budget"]): r["ΔBLEU"] for r in budgets.frame.to_dict("records")}
    for run, line in budgets.verdicts.items():
        for figure, budget in re.findall(r"([−+]\d+\.\d\d) \[[^]]*\]\*? at (\d+)", line):
            assert float(figure.replace("−", "-")) == cells[(run, budget)], (run, budget, line)
    assert "−9.53 [−11.05, −8.00]* at 8000" in budgets.verdicts["none"]


# results/README.md's tables of seeds beside Wu et al.'s 41.02: the section each opens, its experiment, and its rows
# as (label, test split, score in report/seeds.md).
TINY_TABLES = {
    "transformer-tiny": ("## A published number on the CPU", [
        ("| BLEU, lowercase", "test_2016_flickr", "BLEU"), ("| BLEU, cased", "test_2016_flickr", "cased BLEU"),
        ("| chrF, lowercase", "test_2016_flickr", "chrF")]),
    "transformer-tiny-8192": ("### Transformer-tiny as its authors trained it", [
        ("| test2016: BLEU, lowercase", "test_2016_flickr", "BLEU"),
        ("| test2016: BLEU, cased", "test_2016_flickr", "cased BLEU"),
        ("| test2016: chrF, lowercase", "test_2016_flickr", "chrF"),
        ("| test2017: BLEU, lowercase", "test_2017_flickr", "BLEU"),
        ("| test2017: BLEU, cased", "test_2017_flickr", "cased BLEU"),
        ("| MSCOCO 2017: BLEU, lowercase", "test_2017_mscoco", "BLEU"),
        ("| MSCOCO 2017: BLEU, cased", "test_2017_mscoco", "cased BLEU")]),
}  # fmt: skip


@pytest.mark.parametrize("experiment", TINY_TABLES)
def test_the_transformer_tiny_tables_of_results_readme_are_what_the_report_computes(experiment):
    """results/README.md's tables beside Wu et al.'s 41.02 (each seed, mean ± sd and the 95% interval) are read from
    the committed runs as report/seeds.md gives them, not typed: a re-decoded or re-run seed cannot leave them
    stale."""
    from ablate.report.results import load_results
    from ablate.report.seeds import seeds_frame

    heading, labels = TINY_TABLES[experiment]
    readme = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(heading) :]
    section = section[: re.search(r"\n##+ ", section[1:]).start() + 1]  # to the next heading
    frame, _ = seeds_frame(load_results(ROOT / "results" / experiment))
    rows = {(r["split"], r["score"]): r for r in frame.to_dict("records")}
    for label, split, score in labels:
        line = next(line for line in section.splitlines() if line.startswith(label))
        figures = [float(f) for f in re.findall(r"(?<![\d.:])\d+\.\d\d(?![\d.])", line.split("|", 2)[2])]
        row = rows[(split, score)]
        seeds = [row[f"seed {n}"] for n in range(1, row["n"] + 1)]
        expected = [*seeds, row["mean"], row["sd"], row["95% lo"], row["95% hi"]]
        # mean ± sd at least; the interval where the row gives it
        assert row["n"] >= 2 and figures == expected[: len(figures)] and len(figures) >= row["n"] + 2, (
            label, figures, expected)  # fmt: skip


def test_the_transformer_tiny_spread_of_reference_readme_is_the_reference_file_s():
    """results/reference/README.md's table of Transformer-tiny's seeds (BLEU, chrF, the loss curve over the steps its
    check compared, where each stopped; mean ± sd and the tolerance k·sd) is the reference file's, not typed."""
    import statistics

    from ablate.check.reference import load

    ref = load(ROOT / "results" / "reference" / "transformer-tiny.yaml")
    readme = (ROOT / "results" / "reference" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Transformer-tiny checked") :]
    section = section[: section.index("\n## ", 1)]
    last = int(re.search(r"curve mean \(valid loss @ 0, 75, \.\.\., ([\d,]+)\)", section)[1].replace(",", ""))
    steps = sorted(step for step in ref.expected.seeds[ref.expected.first].valid_loss if step <= last)
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in section.splitlines() if line.startswith("| ")}
    columns = {"BLEU": lambda s: s.bleu, "chrF": lambda s: s.chrf, "curve": lambda s: s.curve(steps)}
    k = ref.tolerance.multiple(len(ref.expected.seeds))
    assert rows[f"tolerance (k = {k:.2f})"]  # the k the check uses for this many seeds
    for i, (name, value) in enumerate(columns.items()):
        digits = 4 if name == "curve" else 2
        seeds = [value(run) for run in ref.expected.seeds.values()]
        for seed, got in zip(ref.expected.seeds, seeds, strict=True):
            assert rows[str(seed)][i].strip() == f"{got:.{digits}f}", (seed, name)
        mean, sd = statistics.fmean(seeds), statistics.stdev(seeds)
        assert rows["mean ± sd"][i].strip() == f"{mean:.{digits}f} ± {sd:.{digits}f}", name
        assert rows[f"tolerance (k = {k:.2f})"][i].strip() == f"± {k * sd:.{digits}f}", name
    for seed, run in ref.expected.seeds.items():
        assert rows[str(seed)][3].strip() == f"{max(run.valid_loss):,}"


def test_the_speed_findings_are_the_committed_benches():
    """docs/findings.md's speed table, its baselines' figures and the benches' rounds are what the six committed
    speed.json files say (scripts/speed_findings.py prints them): a bench measured again changes them together."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("speed_findings", ROOT / "scripts" / "speed_findings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    findings = (ROOT / "docs" / "findings.md").read_text()
    assert module.table() in findings
    flat = " ".join(findings.split())
    assert module.baselines() in flat
    assert module.rounds() in flat


def _figure(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


def test_the_readme_findings_table_is_what_the_committed_reports_say():
    """Each row of the README's findings table (ΔBLEU, interval, verdict, seeds a side) is a row of its experiment's
    committed report/table.csv, and a row that sums up an experiment's other rows gives their range, their verdicts
    and their seeds: a seed that lands and changes a report cannot leave the README's answer behind."""
    import csv

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| experiment | row | ΔBLEU [95% interval] | verdict | seeds |") :].split("\n\n")[0]
    matched: dict[str, set[str]] = {}
    checked = 0
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        experiment = re.sub(r"\[(.+?)\]\(.*\)", r"\1", cells[0])
        rows = list(csv.DictReader((ROOT / "results" / experiment / "report" / "table.csv").open(encoding="utf-8")))
        base_n = next(r["n"] for r in rows if r["run"] == "baseline")
        others = [r for r in rows if r["run"] != "baseline" and r["ΔBLEU"]]  # a row without one has no answer
        if m := re.fullmatch(r"([−+]\d+\.\d\d) \[([−+]\d+\.\d\d), ([−+]\d+\.\d\d)\]", cells[2]):
            wanted = tuple(_figure(g) for g in m.groups())
            found = [r for r in others if (float(r["ΔBLEU"]), float(r["ΔBLEU lo"]), float(r["ΔBLEU hi"])) == wanted]
            assert found, f"README: {experiment} | {cells[1]}: {cells[2]} is no row of its report"
            assert cells[3] == found[0]["verdict"], (experiment, cells[1], found[0]["verdict"])
            assert cells[4] == f"{found[0]['n']} v {base_n}", (experiment, cells[1])
            matched.setdefault(experiment, set()).add(found[0]["run"])
        else:  # "its N other rows": the range of their ΔBLEU, how many have each verdict, their seeds a side
            m = re.fullmatch(r"([−+]\d+\.\d\d) to ([−+]\d+\.\d\d)", cells[2])
            named = re.search(r"its (\d+) other rows", cells[1])
            assert m and named, f"README: {experiment} | {cells[1]} | {cells[2]}"
            rest = [r for r in others if r["run"] not in matched.get(experiment, set())]
            assert len(rest) == int(named.group(1)), (experiment, [r["run"] for r in rest])
            deltas = [float(r["ΔBLEU"]) for r in rest]
            assert (min(deltas), max(deltas)) == (_figure(m.group(1)), _figure(m.group(2))), experiment
            counts: dict[str, int] = {}
            for r in rest:
                counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
            said = {item.split(" ", 1)[1]: int(item.split(" ", 1)[0]) for item in cells[3].split(", ")}
            assert said == counts, (experiment, cells[3], counts)
            assert set(cells[4].split(", ")) == {f"{r['n']} v {base_n}" for r in rest}, (experiment, cells[4])
        checked += 1
    assert checked >= 15
