"""Rough edges a new user hits, each through the CLI: files written with the umask's permissions, an unknown corpus
and a directory given for a file as one-line errors, and `ablate --version`."""

import os
import stat

from ablate.files import write_text
from tests.conftest import ROOT, cli


def test_result_files_are_written_with_the_umasks_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.json", "{}")
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644  # mkstemp alone gave 0o600
        os.umask(0o077)
        write_text(tmp_path / "b.json", "{}")
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_every_file_of_a_report_has_the_umasks_permissions(tmp_path):
    """Its tables (written atomically) as its plots: until 2026-11-27 the tables were 0o600 and the PNGs 0o644."""
    import shutil

    shutil.copytree(ROOT / "results" / "width", tmp_path / "width")
    shutil.rmtree(tmp_path / "width" / "report")
    run = cli("report", str(tmp_path / "width"), "--significance", "none", "--output", str(tmp_path / "view"))
    assert run.returncode == 0, run.stderr
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "view").iterdir()}
    assert set(modes.values()) == {0o666 & ~mask}, modes


def test_downloading_an_unknown_corpus_is_one_line():
    run = cli("data", "download", "nope")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == "ablate data download: unknown corpus 'nope' (registered: multi30k, files)"


def test_validating_a_directory_says_to_give_its_files():
    run = cli("validate", "experiments")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert run.stderr.startswith("experiments: a directory, not a YAML file: give the experiment files such as ")


def test_version():
    from importlib.metadata import version

    run = cli("--version")
    assert run.returncode == 0 and run.stdout.strip() == f"ablate {version('ablate')}"


def test_check_lists_every_reference_with_its_mode_and_cost():
    run = cli("check", "--list")
    assert run.returncode == 0, run.stderr
    out = " ".join(run.stdout.split())
    for name in ("base-cpu", "tiny-cpu", "transformer-tiny", "seq2seq-notebook"):
        assert name in out
    assert "not yet measured" in out and "noise" in out and "min" in out


def test_check_outside_the_repository_root_says_where_to_run_it(tmp_path):
    run = cli("check", cwd=tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "run ablate check from the repository root" in run.stderr


def test_check_help_says_what_a_bare_check_runs():
    run = cli("check", "--help")
    assert "A bare `ablate check` checks every measured reference" in " ".join(run.stdout.split())


def test_early_stopping_that_can_never_trigger_is_warned_of():
    smoke = str(ROOT / "experiments" / "smoke.yaml")
    run = cli("validate", smoke, "--set", "training.early_stopping={metric: valid_loss, patience: 4}")
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip() == (f"warning: {smoke}: every run: training.early_stopping.patience: 4 validations "
                                  "without improvement, but the run validates 2 times in its 150 steps, so early "
                                  "stopping can never end it")  # fmt: skip
    quiet = cli("validate", smoke, "--set", "training.early_stopping={metric: valid_loss, patience: 1}")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_dotted_key_below_an_unset_section_sets_it_up():
    """`--set training.early_stopping.patience=4` on a base without early stopping: the section with its
    defaults and that patience, not an error that hides the {metric: ..., patience: ...} form."""
    from ablate.sweep.experiment import load_experiment

    exp = load_experiment(ROOT / "experiments" / "smoke.yaml", ["training.early_stopping.patience=1"])
    stopping = exp.baseline.spec.training.early_stopping
    assert stopping is not None and (stopping.metric, stopping.patience) == ("valid_loss", 1)
    run = cli("validate", str(ROOT / "experiments" / "smoke.yaml"), "--set", "training.early_stopping.patence=1")
    assert run.returncode == 2 and "did you mean 'patience'?" in run.stderr


def test_run_help_groups_its_flags():
    out = cli("run", "--help").stdout
    groups = ["what to train:", "where it trains:", "on a Slurm cluster:", "how rows are judged"]
    assert all(g in out for g in groups)
    assert [out.index(g) for g in groups] == sorted(out.index(g) for g in groups)
    flags = out[out.index("options:") :]  # below the usage line, which names every flag
    assert flags.index("--margin BLEU") > flags.index("how rows are judged") > flags.index("--partition")
