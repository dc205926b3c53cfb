"""Bad input and interruptions as a new user meets them (issue 76), each through the CLI: one line naming the file,
the key (or the flag the user set) and what is wrong, exit code 2, nothing written; a closed pipe and a Ctrl-C at
any moment end quietly, with a true message."""

import os
import signal
import subprocess
import sys
import time

import pytest

import ablate
from tests.conftest import ROOT, cli

SMOKE = ROOT / "experiments" / "smoke.yaml"


def spec(tmp_path, text: str):
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\nextends: {SMOKE}\n{text}")
    return path


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("margin: .inf\n", "margin: input should be a finite number (got inf)"),
        ("seed_sd: .nan\n", "seed_sd: expected a finite number or {from: ...} (got nan)"),
        ("training: {label_smoothing: .inf}\n", "training.label_smoothing: input should be a finite number (got inf)"),
        ("model: {dropout: .nan}\n", "model.dropout: input should be a finite number (got nan)"),
    ],
)
def test_inf_and_nan_are_refused_wherever_a_number_is_read(tmp_path, text, line):
    run = cli("validate", str(spec(tmp_path, text)))
    assert run.returncode == 2
    assert run.stderr.strip() == f"{tmp_path / 'e.yaml'}: {line}"


def test_inf_given_with_set_is_refused_and_named():
    run = cli("validate", str(SMOKE), "--set", "training.label_smoothing=.inf")
    assert run.returncode == 2
    assert run.stderr.strip() == ("--set training.label_smoothing=.inf: training.label_smoothing: input should be a "
                                  "finite number (got inf)")  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("seed_sd: banana\n", "seed_sd: expected a number or {from: ...} (got 'banana')"),
        ("seed_sd: -1\n", "seed_sd: expected a number greater than 0 or {from: ...} (got -1)"),
        ("training: {validate_every: banana}\n", "training.validate_every: expected a whole number or 'epoch' "
                                                 "(got 'banana')"),
        ("training: {validate_every: 0}\n", "training.validate_every: expected a whole number greater than 0 or "
                                            "'epoch' (got 0)"),
    ],
)  # fmt: skip
def test_an_either_or_key_answers_in_one_line_naming_what_it_accepts(tmp_path, text, line):
    run = cli("validate", str(spec(tmp_path, text)))
    assert run.returncode == 2
    assert run.stderr.strip() == f"{tmp_path / 'e.yaml'}: {line}"


def test_yaml_exponents_are_the_numbers_they_mean(tmp_path):
    path = spec(tmp_path, "training: {schedule: {name: inverse_sqrt, lr: 1e-9, warmup: 20}}\n")
    assert cli("validate", str(path)).returncode == 0
    assert ablate.load_experiment(path).baseline.spec.training.schedule.params.lr == 1e-9
    changed = ablate.load_experiment(SMOKE, ["training.schedule.lr=2E-3"]).baseline.spec.training.schedule
    assert changed.params.lr == 0.002
    text = spec(tmp_path, "description: 1e-9 is a string here\n")
    assert ablate.load_experiment(text).description == "1e-9 is a string here"


def test_an_error_names_the_key_the_user_set_not_the_file_that_set_another():
    run = cli("validate", str(ROOT / "experiments/pe.yaml"), "--set", "model.d_model=255")
    assert run.returncode == 2
    assert run.stderr.strip() == ("--set model.d_model=255: model.heads: heads=4 does not divide d_model=255; "
                                  "choose heads that divide it, or set d_k")  # fmt: skip


def test_results_that_is_an_experiments_directory_is_refused_and_names_its_parent(tmp_path):
    experiment = tmp_path / "pe"
    (experiment / "runs").mkdir(parents=True)
    (experiment / "design.json").write_text('{"margin": 1.0, "alpha": 0.05, "seeds": [1], "first": 1}\n')
    before = sorted(p.name for p in experiment.rglob("*"))
    run = cli("run", str(ROOT / "experiments/pe.yaml"), "--results", str(experiment), "--margin", "3")
    assert run.returncode == 2
    assert run.stderr.strip() == (f"--results {experiment}: an experiment's directory (it holds design.json); "
                                  f"--results takes the directory experiments go in: --results {tmp_path}")  # fmt: skip
    assert sorted(p.name for p in experiment.rglob("*")) == before  # no nested pe/, no design declared


def test_downloading_a_corpus_of_your_own_files_says_there_is_nothing_to_download():
    run = cli("data", "download", "files")
    assert run.returncode == 2
    assert run.stderr.strip() == ("ablate data download: corpus 'files' is read from your own files "
                                  "(data.corpus.paths in a spec); there is nothing to download")  # fmt: skip


@pytest.mark.parametrize("command", [["schema"], ["parts"], ["check", "--list"]])
def test_a_closed_pipe_ends_quietly_with_the_shells_sigpipe_code(command):
    """`ablate schema | head`: the reader has gone before the writer has finished; no traceback, and 141 (128 +
    SIGPIPE, what a shell reports for a program SIGPIPE ended), not 1, which means a failed run."""
    process = subprocess.Popen([sys.executable, "-m", "ablate.cli", *command], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    process.stdout.close()  # the reader has gone: every write fails
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, err
    assert err == ""


def ctrl_c(tmp_path, when: str):
    """`ablate run` of smoke's baseline, interrupted at `when`: its exit code, stderr and run directory."""
    directory = tmp_path / "smoke/runs/baseline/seed-1"
    process = subprocess.Popen(
        [sys.executable, "-m", "ablate.cli", "run", str(SMOKE), "--only", "baseline", "--results", str(tmp_path),
         "--set", "training.max_steps=3000", "--set", "training.checkpoint_every=1000"],
        cwd=ROOT, env=os.environ | {"PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    # SIGINT as a terminal's shell leaves it to a command it starts: an xdist worker may have it ignored, and a
    # process that inherits it ignored hears no Ctrl-C until `ablate run` takes it back, later than 1.5 s on a busy
    # machine
    deadline = time.monotonic() + 120
    if when == "at once":
        time.sleep(1.5)  # within the command's imports (before them, Python itself starts: no handler of ours yet)
    else:
        line = ""
        while "started on cpu" not in line and time.monotonic() < deadline:
            line = process.stdout.readline()
        if when == "training":
            while (
                not (directory / "metrics.jsonl").is_file() or '"loss"' not in (directory / "metrics.jsonl").read_text()
            ):
                time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    return process.returncode, err, directory


def test_a_program_that_imports_the_cli_keeps_its_own_ctrl_c():
    """Only the command answers a Ctrl-C while it starts with one line and exit 130; a program that imports
    ablate.cli (a notebook, a script) still gets KeyboardInterrupt."""
    probe = "import signal, ablate.cli; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    assert done.stdout.strip() == "True", done.stderr


@pytest.mark.parametrize("when", ["at once", "as the worker starts", "training"])
def test_ctrl_c_at_any_moment_is_one_true_line(tmp_path, when):
    code, err, directory = ctrl_c(tmp_path, when)
    assert code == 130, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert_a_true_last_line(err, directory)


def assert_a_true_last_line(err: str, directory):
    """What `ablate run` says last after a Ctrl-C agrees with what the run directory holds."""
    last = err.strip().splitlines()[-1]  # the message, then the command that resumes: `...: ablate run FILE ...`
    has_checkpoint = (directory / "checkpoints/last.json").is_file()
    if has_checkpoint:
        said = ["interrupted: 1 run(s) have a checkpoint to resume from; to resume, run the same command again"]
    else:
        said = [
            "interrupted",
            "interrupted before any run started; run the same command again to start them",
            "interrupted before the run saved a checkpoint: the same command starts it again from the beginning",
        ]
    assert last.split(": ablate run ")[0] in said, last


def test_a_ctrl_c_python_swallows_as_a_worker_is_forked_still_stops_the_sweep(tmp_path):
    """Python cannot raise a KeyboardInterrupt inside a callback around fork (logging's lock release, as the sweep
    starts the fork server or a worker with a preexec_fn): it printed "Exception ignored" with a traceback, and the
    sweep trained on to the end and exited 0. Here the SIGINT is sent from such a callback, on the first fork, so
    it lands there every time: held back while the process forks, it stops the sweep as any Ctrl-C does."""
    program = (
        "import os, signal, sys\n"
        "fired = []\n"
        "def ctrl_c():\n"
        "    if not fired:\n"
        "        fired.append(1)\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "os.register_at_fork(after_in_parent=ctrl_c)\n"
        "from ablate.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "run", str(SMOKE), "--only", "baseline", "--results", str(tmp_path),
         "--set", "training.max_steps=3000"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    directory = tmp_path / "smoke/runs/baseline/seed-1"
    assert_a_true_last_line(done.stderr, directory)
    assert not (directory / "result.json").exists()  # stopped, not trained to its end


def test_dry_run_prices_from_the_committed_runs_where_this_machine_has_none(tmp_path):
    run = cli("run", str(ROOT / "experiments/pe.yaml"), "--dry-run", "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    (cost,) = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("cost:")]
    assert cost.startswith("cost: 12 to train now: about ") and "run-hours, from " in cost, cost
    assert "finished runs of this experiment on " in cost and "0.0 run" not in cost


def test_run_time_never_reads_zero():
    from ablate.sweep.dryrun import run_time

    said = [run_time(s) for s in (1, 30, 90, 600, 7100, 7300)]
    assert said == ["1 run-minute", "1 run-minute", "2 run-minutes", "10 run-minutes", "118 run-minutes",
                    "2.0 run-hours"]  # fmt: skip


def test_docs_spec_documents_every_key_of_a_spec_and_an_experiment_file():
    """Every field of RunSpec and of the experiment file's header, at every depth, is named in docs/spec.md."""
    import re

    from pydantic import BaseModel

    from ablate.sweep.experiment import Header
    from ablate.train.spec import RunSpec

    text = (ROOT / "docs/spec.md").read_text()

    def keys(model, prefix=()):
        for name, field in model.model_fields.items():
            yield ".".join((*prefix, field.alias or name))
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from keys(field.annotation, (*prefix, name))

    missing = [key for model in (RunSpec, Header) for key in keys(model)
               if not re.search(rf"\b{re.escape(key.split('.')[-1])}\b", text)]  # fmt: skip
    assert not missing, f"docs/spec.md does not document {missing}"


def test_docs_give_each_references_cost_as_check_list_does():
    """docs/running.md's table of references quotes, for each measured one, the minutes `ablate check --list` shows."""
    from ablate.check.reference import load

    rows = {line.split("|")[1].strip(" `"): line for line in (ROOT / "docs/running.md").read_text().splitlines()
            if line.startswith("| `")}  # fmt: skip
    for path in sorted((ROOT / "results/reference").glob("*.yaml")):
        wall = load(path).environment.get("wall_seconds")
        if isinstance(wall, int | float):
            assert f"{wall / 60:.0f} min where it was measured" in rows[path.stem], path.stem


def test_the_main_command_answers_without_the_corpus(tmp_path):
    """`ablate run experiments/pe.yaml` in a clone without the corpus: the committed runs are read, and the command
    ends with the README's rows, their intervals and verdicts, and names the page; no data directory is made."""
    missing = tmp_path / "no-corpus"
    run = cli("run", "experiments/pe.yaml", env={"ABLATE_DATA_DIR": str(missing), "COLUMNS": "120"})
    assert run.returncode == 0, run.stderr
    rows: dict[str, str] = {}
    for line in run.stdout.splitlines():  # the first table's rows: the comparison
        if line.split()[:1] in (["learned"], ["none"], ["rotary"]):
            rows.setdefault(line.split()[0], line)
    assert "−2.43 [−3.50, −1.36]*" in rows["learned"] and "worse" in rows["learned"]
    assert "−9.53 [−11.05, −8.00]*" in rows["none"] and "worse" in rows["none"]
    assert "+0.73 [−0.79, +2.24]" in rows["rotary"] and "undecided" in rows["rotary"]
    assert run.stdout.strip().splitlines()[-1].startswith("page: results/pe/report/index.html")
    assert not missing.exists()


def test_dry_run_prices_a_run_slowed_by_other_work_at_its_typical_step(tmp_path):
    """A run whose last third of steps ran ten times slower (a test suite beside it, a stopped sweep) is priced at
    its typical step, and a run at an even pace at its wall time."""
    import random

    from ablate.record import RunResult
    from ablate.rundir import append_metrics
    from ablate.sweep.dryrun import typical_wall

    rng = random.Random(0)
    steps = {"even": [rng.uniform(80, 150) for _ in range(1500)]}
    steps["slowed"] = steps["even"][:1000] + [10 * ms for ms in steps["even"][1000:]]
    wall = {}
    for name, times in steps.items():
        directory = tmp_path / name
        directory.mkdir()
        for step, ms in enumerate(times, 1):
            append_metrics(directory, {"step": step, "step_ms": round(ms, 1)})
        train = sum(times) / 1000 + 30  # with 30 s of validation
        result = RunResult(run=name, seed=1, status="completed", train_seconds=train, wall_seconds=train + 60)
        wall[name] = (typical_wall(result, directory), result.wall_seconds)
    assert wall["even"][0] == pytest.approx(wall["even"][1], rel=0.01)  # a few long batches are not a slowdown
    assert wall["slowed"][1] > 2.5 * wall["even"][1]
    assert wall["slowed"][0] == pytest.approx(wall["even"][1], rel=0.15)


def test_dry_run_prices_runs_not_finished_here_at_another_machines_times_scaled(tmp_path, monkeypatch):
    """This machine finished run a in 1,000 s; another finished a in 500 s and b in 800 s: b costs 1,600 s here, and
    c, finished nowhere, the median of this machine's runs."""
    from ablate.record import RunResult
    from ablate.rundir import job_dir, write_result
    from ablate.sweep import dryrun

    monkeypatch.setattr(dryrun, "_this_machine", lambda: "Here CPU (AVX2)")
    monkeypatch.setattr(dryrun, "_this_machine_has_gpu", lambda: False)
    for run, device, seconds in [("a", "Here CPU (AVX2)", 1000), ("a", "There CPU (AMX)", 500),
                                 ("b", "There CPU (AMX)", 800)]:  # fmt: skip
        directory = job_dir(tmp_path / "e", run, 1 if device.startswith("Here") else 2)
        directory.mkdir(parents=True)
        write_result(directory, RunResult(run=run, seed=1, status="completed", device=f"{device}, 1 thread",
                                          wall_seconds=seconds))  # fmt: skip
    cost = dryrun.Cost.of(["a", "b", "c"], "e", tmp_path)
    assert cost.seconds == pytest.approx(1000 + 1600 + 1000) and cost.measured == 1
    assert cost.say(cost.seconds, "3 to train now") == (
        "3 to train now: about 60 run-minutes, from 1 finished run of this experiment on this machine (the same CPU "
        "model, ISA and bf16, or GPU), one run at a time, slowed steps at their median; runs not finished here at "
        "their times on There CPU (AMX), scaled by the runs finished on both"
    )
    monkeypatch.setattr(dryrun, "_this_machine", lambda: "Elsewhere CPU")
    cost = dryrun.Cost.of(["a", "b", "c"], "e", tmp_path)
    assert cost.seconds == pytest.approx(500 + 800 + 650) and cost.machines == ["There CPU (AMX)"]
