"""Each run's BLEU statistics, kept beside its hypotheses (ablate.bleu_statistics): counted as the report counts
them, tied to the hypotheses they were counted from, and all that a report needs without the corpus."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ablate.bleu_statistics import COLUMNS, References, kept, read
from ablate.data.corpus import CORPUS, data_dir
from ablate.report.frame import report_frame
from ablate.report.results import load_results, references
from ablate.report.significance import bleu_statistics, paired_p
from ablate.rundir import (
    BUDGET_POINTS,
    HYPOTHESES,
    RUNS,
    STALE,
    hypotheses_path,
    read_config,
    read_hypotheses,
    statistics_path,
)
from tests.conftest import ROOT, cli

SPLIT = "test_2016_flickr"
RESULTS = ROOT / "results"
NOT_YET: set[str] = set()  # every experiment's runs keep their statistics (the worker writes them for new ones)


def copied(experiment: Path, to: Path, statistics: bool = True) -> Path:
    """A copy of a committed experiment's files (its checkpoints are not committed), with or without statistics."""
    shutil.copytree(experiment, to / experiment.name, ignore=shutil.ignore_patterns("checkpoints", "report"))
    if not statistics:
        for path in (to / experiment.name).rglob("*.bleu.json"):
            path.unlink()
    return to / experiment.name


def lowercase(directory: Path) -> bool:
    return bool(read_config(directory).get("evaluation", {}).get("lowercase", False))


def test_the_kept_statistics_are_sacrebleus_count_of_the_hypotheses_file(tmp_path):
    run = tmp_path / "seed-1"
    shutil.copytree(RESULTS / "pe" / RUNS / "baseline" / "seed-1" / HYPOTHESES, run / HYPOTHESES)
    shutil.copy(RESULTS / "pe" / RUNS / "baseline" / "seed-1" / "config.yaml", run)
    refs = references(read_config(run), SPLIT)
    (run / HYPOTHESES / f"{SPLIT}.bleu.json").unlink(missing_ok=True)
    assert References(refs, False).keep(run, SPLIT) and not References(refs, False).keep(run, "test_2017_flickr")
    kept_ = read(run, SPLIT)
    hypotheses = read_hypotheses(run, SPLIT)
    assert kept_.rows == bleu_statistics(hypotheses, refs, False).astype(int).tolist() and len(kept_.rows) == 1000
    assert kept_.columns == COLUMNS and kept_.lowercase is False and "tok:13a" in kept_.signature
    assert kept_.hypotheses_sha256 == hashlib.sha256(hypotheses_path(run, SPLIT).read_bytes()).hexdigest()
    assert kept_.references_sha256 == hashlib.sha256("\n".join(refs).encode()).hexdigest()
    # sacreBLEU's corpus BLEU from the kept sums is the run's own score
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    assert bleu._compute_score_from_stats(list(np.sum(kept_.rows, axis=0))).score == pytest.approx(
        bleu.corpus_score(hypotheses, [refs]).score, abs=1e-9
    )
    assert statistics_path(run, SPLIT).stat().st_size < 30 * len(kept_.rows)  # one row a line, about 27 bytes


def test_references_in_nfd_are_counted_as_the_run_was_scored():
    """The worker scores both sides in NFC (evaluation.score): the statistics' sums give that BLEU, whatever the
    references' normal form (German's umlauts written as a letter and a combining diaeresis)."""
    import unicodedata

    from sacrebleu.metrics import BLEU

    from ablate.train.evaluation import score

    refs = references(read_config(RESULTS / "pe" / RUNS / "baseline" / "seed-1"), SPLIT)
    hypotheses = read_hypotheses(RESULTS / "pe" / RUNS / "baseline" / "seed-1", SPLIT)
    nfd = [unicodedata.normalize("NFD", r) for r in refs]
    assert sum(a != b for a, b in zip(nfd, refs, strict=True)) > 100  # many references change
    sums = list(np.sum(References(nfd, False).count(hypotheses), axis=0))
    assert round(BLEU()._compute_score_from_stats(sums).score, 2) == score(hypotheses, nfd).bleu == score(
        hypotheses, refs).bleu  # fmt: skip


def test_statistics_of_other_hypotheses_or_another_case_are_not_read(tmp_path):
    run = tmp_path / "seed-1"
    shutil.copytree(RESULTS / "pe" / RUNS / "baseline" / "seed-1" / HYPOTHESES, run / HYPOTHESES)
    shutil.copy(RESULTS / "pe" / RUNS / "baseline" / "seed-1" / "config.yaml", run)
    References(references(read_config(run), SPLIT), False).keep(run, SPLIT)
    assert kept(run, SPLIT, False) == (read(run, SPLIT), "")
    assert kept(run, SPLIT, True)[0] is None and "counted otherwise" in kept(run, SPLIT, True)[1]
    path = hypotheses_path(run, SPLIT)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
    name = f"hypotheses/{SPLIT}.bleu.json"
    assert kept(run, SPLIT, False) == (None, f"its {name} is of other hypotheses than {SPLIT}.txt")
    statistics_path(run, SPLIT).write_text("{")
    assert kept(run, SPLIT, False) == (None, f"its {name} cannot be read")
    statistics_path(run, SPLIT).unlink()
    assert kept(run, SPLIT, False) == (None, f"it has no {name}")


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_p_from_the_statistics_is_sacrebleus_paired_test_on_the_text(test):
    """sacreBLEU's PairedTest, handed the statistics, gives the p-values it gives from the hypotheses and the
    references, to the last bit (200 sentences of three pe runs: approximate randomisation scores 10,000 trials)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    runs = {run: RESULTS / "pe" / RUNS / run / "seed-1" for run in ("baseline", "rotary", "learned")}
    refs = references(read_config(runs["baseline"]), SPLIT)[:200]
    hyps = {run: read_hypotheses(directory, SPLIT)[:200] for run, directory in runs.items()}
    named = list(hyps.items())
    _, scores = PairedTest(named, {"BLEU": BLEU()}, [refs], test_type=test)()
    expected = {name: r.p_value for name, r in zip(scores["System"][1:], scores["BLEU"][1:], strict=True)}
    stats = {run: bleu_statistics(lines, refs, False) for run, lines in hyps.items()}
    got = paired_p(stats["baseline"], {"rotary": stats["rotary"], "learned": stats["learned"]}, test)
    assert got == expected and 0 < got["rotary"] < 1


def test_the_report_of_pe_without_the_corpus_is_the_report_with_it_and_makes_no_directory(tmp_path):
    """`ablate report results/pe` where the corpus is not (ABLATE_DATA_DIR at a directory that does not exist)
    prints every interval and verdict it prints from the references, once scripts/backfill_sentence_stats.py has
    counted the statistics; and it leaves the missing data directory missing."""
    with_corpus, without = tmp_path / "with" / "results", tmp_path / "without" / "results"
    copied(RESULTS / "pe", with_corpus, statistics=False)
    copied(RESULTS / "pe", without, statistics=False)
    backfill = subprocess.run([sys.executable, str(ROOT / "scripts" / "backfill_sentence_stats.py"), str(without)],
                              capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert backfill.returncode == 0 and "pe: 48 written" in backfill.stdout, backfill.stderr
    again = subprocess.run([sys.executable, str(ROOT / "scripts" / "backfill_sentence_stats.py"), str(without)],
                           capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert "pe: 0 written (0.00 MB), 48 had statistics of their hypotheses already" in again.stdout
    nowhere = tmp_path / "nowhere" / "data"
    read = cli("report", "results/pe", "--no-files", cwd=with_corpus.parent)
    kept_ = cli("report", "results/pe", "--no-files", cwd=without.parent, env={"ABLATE_DATA_DIR": str(nowhere)})
    assert read.returncode == kept_.returncode == 0, kept_.stderr
    assert kept_.stdout == read.stdout
    for row in ("−2.43 [−3.50, −1.36]*  worse", "−9.53 [−11.05, −8.00]*  worse", "+0.73 [−0.79, +2.24]  undecided"):
        assert row in kept_.stdout  # the README's findings table
    assert not nowhere.parent.exists()


def test_without_statistics_or_the_corpus_a_note_names_the_run_and_nothing_is_made(tmp_path, monkeypatch):
    experiment = copied(RESULTS / "pe", tmp_path, statistics=False)
    References(references(read_config(experiment / RUNS / "baseline" / "seed-1"), SPLIT), False).keep(
        experiment / RUNS / "baseline" / "seed-1", SPLIT
    )
    nowhere = tmp_path / "nowhere"
    monkeypatch.setenv("ABLATE_DATA_DIR", str(nowhere))
    frame, notes = report_frame(load_results(experiment))
    assert "ΔBLEU lo" not in frame.columns and "verdict" not in frame.columns
    note = next(n for n in notes if "not computed" in n)
    assert note.startswith("len ratio, ΔBLEU intervals, p and verdicts not computed: ")
    assert f"{experiment / RUNS / 'baseline' / 'seed-2'}: it has no hypotheses/{SPLIT}.bleu.json, and the test " in note
    assert f"references are not readable: {nowhere / 'multi30k'}: missing" in note
    assert note.endswith("(point ABLATE_DATA_DIR at the corpora, or run: ablate data download multi30k)")
    assert not nowhere.exists()


def test_a_corpus_says_whether_a_split_is_there_without_fetching_it(tmp_path):
    multi30k = CORPUS.build(CORPUS.parse("multi30k"), root=tmp_path / "data")
    assert not multi30k.present(SPLIT, "de") and not (tmp_path / "data").exists()
    assert CORPUS.build(CORPUS.parse("multi30k"), root=data_dir()).present(SPLIT, "de")  # the tests' corpora


def test_the_worker_keeps_the_statistics_of_what_it_decoded(smoke_run):
    """Every scored seed of `ablate run experiments/smoke.yaml` has its statistics, counted as the report counts."""
    seeds = sorted((smoke_run.results / "smoke" / RUNS).glob("*/seed-*"))
    assert seeds
    for seed in seeds:
        for path in (seed / HYPOTHESES).glob("*.txt"):
            statistics, why = kept(seed, path.stem, lowercase(seed))
            assert statistics is not None, why
            refs = references(read_config(seed), path.stem)
            counted = bleu_statistics(read_hypotheses(seed, path.stem), refs, lowercase(seed))
            assert statistics.rows == counted.astype(int).tolist()


def test_every_committed_run_keeps_the_statistics_of_its_hypotheses():
    """So that a fresh clone without the corpus prints the committed reports' intervals and verdicts (a result set
    aside, seed-<n>.stale-<hash>, keeps its scores for seeds.md; no interval reads its hypotheses)."""
    scored = {path.parent.parent for path in RESULTS.rglob(f"{HYPOTHESES}/*.txt")
              if path.relative_to(RESULTS).parts[0] not in NOT_YET and STALE not in str(path)}  # fmt: skip
    assert len(scored) > 400
    missing = []
    for directory in sorted(scored):
        seed = directory.parent.parent if directory.parent.name == BUDGET_POINTS else directory
        for path in (directory / HYPOTHESES).glob("*.txt"):
            statistics, why = kept(directory, path.stem, lowercase(seed))
            if statistics is None:
                missing.append(f"{directory.relative_to(ROOT)}: {why}")
    assert not missing, "\n".join(missing[:5]) + "\n(scripts/backfill_sentence_stats.py counts them)"
