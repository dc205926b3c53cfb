"""The runner: isolation in processes, resume after kill -9 and Ctrl-C, changed specs, seeds, DDP, launchers."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from ablate.rundir import decoding_changes, read_metrics, read_validations, set_aside_for_decoding
from tests.conftest import ALL_CORES, ROOT, cli, on_cores

SMOKE = ROOT / "experiments" / "smoke.yaml"
# for runs whose scores no assertion reads: greedy decoding of a few tokens past the source, on fewer pairs
CHEAP = ["--set", "evaluation.beam_size=1", "--set", "evaluation.max_extra_len=5", "--set", "data.max_pairs=200"]
DETERMINISTIC = ["run", "differs", "params", "BLEU", "n", "chrF", "valid loss", "status"]


def table(root):
    with open(root / "summary.csv") as f:
        return {row["run"]: row for row in csv.DictReader(f)}


def result(root, run, seed=1):
    return json.loads((root / "runs" / run / f"seed-{seed}" / "result.json").read_text())


def losses(root, run, seed=1):
    lines = (root / "runs" / run / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if "loss" in r]


def start(*args, sigint_ignored=False, cores=None):
    """`ablate run ARGS` in the background, its output to a pipe (not a terminal), on `cores` (default: this
    worker's).

    `sigint_ignored`: started as from the background of a non-interactive shell (`nohup ... &`), which
    hands the process SIGINT ignored.
    """
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    pin = on_cores(cores)

    def before():
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if pin is not None:
            pin()

    return subprocess.Popen([sys.executable, "-m", "ablate.cli", "run", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=before)  # fmt: skip


def wait_for_checkpoint(directory, proc, at_least, timeout=120):
    """Waits until the run's checkpoint is at `at_least` steps or more; returns its step."""
    info = directory / "checkpoints" / "last.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if info.is_file():
            step = json.loads(info.read_text())["step"]
            if step >= at_least:
                return step
        time.sleep(0.05)
    raise AssertionError("no checkpoint in time")


def test_failed_killed_and_diverged_runs_are_recorded_and_the_sweep_goes_on(tmp_path, write):
    plugin = ROOT / "tests" / "fixtures" / "failing_part.py"
    path = write("e.yaml", f"""
name: isolation
extends: {SMOKE}
plugins: [{plugin}]
data: {{max_pairs: 200}}
training: {{max_steps: 30, validate_every: 30}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
variants:
  explodes: {{training.schedule: {{name: constant, lr: 1.0e+4}}}}
  breaks: {{model.feedforward: broken_on_purpose}}
  killed: {{model.feedforward: killed_on_purpose}}
""")  # fmt: skip
    run = cli("run", str(path), "--results", str(tmp_path))
    assert run.returncode == 1
    assert "isolation/breaks/seed-1: RuntimeError: this part fails on purpose" in run.stderr
    assert "isolation/killed/seed-1: worker killed by SIGKILL" in run.stderr
    root = tmp_path / "isolation"
    assert result(root, "baseline")["status"] == "completed"
    explodes = result(root, "explodes")
    assert explodes["status"] == "diverged" and "training loss" in explodes["error"] and "scores" not in explodes
    assert result(root, "breaks")["status"] == "failed" and "Traceback" in result(root, "breaks")["traceback"]
    assert result(root, "killed")["status"] == "failed" and "out of memory?" in result(root, "killed")["error"]
    rows = table(root)
    for name, status in [("explodes", "diverged"), ("breaks", "failed"), ("killed", "failed")]:
        assert rows[name]["BLEU"] == "" and rows[name]["status"] == status
    assert rows["baseline"]["BLEU"] != ""


def test_every_run_completed_or_diverged_exits_0(tmp_path, write):
    path = write("e.yaml", f"""
name: diverges
extends: {SMOKE}
data: {{max_pairs: 200}}
training: {{max_steps: 10, validate_every: 10}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
variants:
  explodes: {{training.schedule: {{name: constant, lr: 1.0e+4}}}}
""")  # fmt: skip
    run = cli("run", str(path), "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert table(tmp_path / "diverges")["explodes"]["status"] == "diverged"


def test_kill_9_then_resume_gives_the_uninterrupted_table(tmp_path):
    """Both runs of a sweep killed mid-training, resumed, and compared with a sweep that was never stopped.

    With checkpoint averaging on, so that the resumed runs must also average the same steps. The resumed and
    the straight sweep are two processes each: their equal tables also show that the same spec and seed give
    the same BLEU (tests/test_check.py compares a re-run's hypotheses by hash too). On every core, so that
    both runs train at once and are both killed mid-training.
    """
    # killed once both have a checkpoint at step 20 or later, a tenth of the way: on a fast CPU, with the other
    # xdist worker on one core, a 200-step run finished before its neighbour reached step 50 (once, on an AMX Xeon)
    args = [str(SMOKE), "--set", "training.max_steps=200", "--set", "training.checkpoint_every=10",
            "--set", "evaluation.average_checkpoints=4", *CHEAP]  # fmt: skip
    proc = start(*args, "--results", str(tmp_path / "killed"), cores=ALL_CORES)
    killed_root, straight_root = tmp_path / "killed" / "smoke", tmp_path / "straight" / "smoke"
    runs = {run: killed_root / "runs" / run / "seed-1" for run in ("baseline", "pre_ln")}
    for directory in runs.values():  # the other xdist worker shares one of the cores: one run may be slower
        wait_for_checkpoint(directory, proc, at_least=20)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not any((directory / "result.json").exists() for directory in runs.values())  # both mid-training

    resumed = cli("run", *args, "--results", str(tmp_path / "killed"), cores=ALL_CORES)
    assert resumed.returncode == 0, resumed.stderr
    for run in runs:
        assert f"{run}/seed-1: resumes from step" in resumed.stdout
        assert result(killed_root, run)["resumed_from_step"] >= 20
    straight = cli("run", *args, "--results", str(tmp_path / "straight"), cores=ALL_CORES)
    assert straight.returncode == 0, straight.stderr

    killed, uninterrupted = table(killed_root), table(straight_root)
    for run in ["baseline", "pre_ln"]:
        assert {c: killed[run][c] for c in DETERMINISTIC} == {c: uninterrupted[run][c] for c in DETERMINISTIC}
        assert losses(killed_root, run) == losses(straight_root, run)
        for root in (killed_root, straight_root):
            assert result(root, run)["averaged_steps"] == [170, 180, 190, 200]
    again = cli("run", *args, "--results", str(tmp_path / "killed"))  # everything done: nothing trains
    assert "0 to train" in again.stdout and "completed earlier" in again.stdout


def test_a_run_that_lost_its_checkpoints_starts_over_without_the_earlier_attempts_logs(tmp_path):
    """Results copied without their checkpoints (git keeps no *.pt): the run trains again from step 0, and its
    metrics and diagnostics hold each step once, as an uninterrupted run's do, not the dead attempt's too."""
    args = [str(SMOKE), "--only", "baseline", "--results", str(tmp_path), "--set", "training.max_steps=40",
            "--set", "training.diagnostics_every=10", "--set", "training.checkpoint_every=10", *CHEAP]  # fmt: skip
    first = cli("run", *args)
    assert first.returncode == 0, first.stderr
    d = tmp_path / "smoke" / "runs" / "baseline" / "seed-1"
    logged = {name: (d / name).read_text().splitlines() for name in ("metrics.jsonl", "diagnostics.jsonl")}
    diagnosed = [r["step"] for r in map(json.loads, logged["diagnostics.jsonl"])]
    assert diagnosed == [0, 10, 20, 30, 40]
    for path in [d / "result.json", *(d / "checkpoints").iterdir()]:
        path.unlink()  # what a clone of the results holds of a run that was still training

    again = cli("run", *args)
    assert again.returncode == 0, again.stderr
    assert "1 to train" in again.stdout and "resumes" not in again.stdout
    assert [r["step"] for r in map(json.loads, (d / "diagnostics.jsonl").read_text().splitlines())] == diagnosed
    for name, lines in logged.items():
        assert untimed((d / name).read_text().splitlines()) == untimed(lines), name


def untimed(lines):
    """The records of a log without their timings, which differ from one run to the next."""
    return [{k: v for k, v in json.loads(line).items() if k not in ("wall_s", "step_ms", "seconds")} for line in lines]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; `kill PID`, or a sweep under nohup
def test_ctrl_c_or_sigterm_saves_a_checkpoint_and_says_how_to_resume(tmp_path, sig):
    args = [str(SMOKE), "--only", "baseline", "--set", "training.max_steps=5000", "--results", str(tmp_path)]
    proc = start(*args, "--set", "training.checkpoint_every=1000", sigint_ignored=True)  # `kill -INT` still stops it
    directory = tmp_path / "smoke" / "runs" / "baseline" / "seed-1"
    deadline = time.monotonic() + 120
    while not losses_logged(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "run the same command again" in err and "Traceback" not in err
    step = json.loads((directory / "checkpoints" / "last.json").read_text())["step"]
    assert 0 < step < 1000  # saved where it stopped, not at a scheduled checkpoint
    plan = cli("run", *args, "--set", "training.checkpoint_every=1000", "--dry-run")
    assert f"resume: resumes from step {step}" in plan.stdout


def losses_logged(directory):
    """Whether the run has logged a training step (the step-0 validation comes before any)."""
    return any("loss" in r for r in read_metrics(directory))


def test_a_worker_that_waited_for_a_run_another_process_finished_leaves_it_alone(tmp_path, smoke_run):
    """Two sweeps, one run: the second planned it before the first's worker finished, and its worker waits for
    the lock. Once it has the lock, it finds the result and neither decodes nor writes anything again."""
    from ablate.rundir import RunLock

    assert smoke_run.returncode == 0, smoke_run.stderr
    shutil.copytree(smoke_run.results, tmp_path, dirs_exist_ok=True)
    directory = tmp_path / "smoke" / "runs" / "baseline" / "seed-1"
    job = json.loads((directory / "job.json").read_text())
    (directory / "job.json").write_text(json.dumps(job | {"directory": str(directory)}))  # the copy, not smoke's
    before = {f: f.read_bytes() for f in directory.rglob("*") if f.is_file() and f.name != ".lock"}
    lock = RunLock(directory)
    assert lock.acquire(wait=False)  # the first sweep's worker, decoding its last point
    worker = subprocess.Popen([sys.executable, "-m", "ablate.worker", str(directory)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(3)
    assert worker.poll() is None  # it waits for the lock
    lock.release()
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    assert "another process finished this run while this one waited; nothing to do" in out
    after = {f: f.read_bytes() for f in directory.rglob("*") if f.is_file() and f.name != ".lock"}
    assert after == before  # result.json, the hypotheses and the logs as the first worker left them


def test_a_changed_spec_is_run_again_and_the_table_says_so(tmp_path, smoke_run):
    assert smoke_run.returncode == 0, smoke_run.stderr
    shutil.copytree(smoke_run.results, tmp_path, dirs_exist_ok=True)  # smoke as the shared run left it
    old = result(tmp_path / "smoke", "baseline")
    changed = cli("run", str(SMOKE), "--only", "baseline", "--set", "training.max_steps=30", *CHEAP,
                  "--results", str(tmp_path))  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert "the spec changed since the earlier result" in changed.stdout
    new = result(tmp_path / "smoke", "baseline")
    assert new["config_hash"] != old["config_hash"] and new["steps"] == 30
    assert table(tmp_path / "smoke")["baseline"]["note"].startswith("re-run: the spec changed")
    kept = tmp_path / "smoke" / "runs" / "baseline" / f"seed-1.stale-{old['config_hash']}" / "result.json"
    assert json.loads(kept.read_text()) == old  # the earlier result is set aside, not lost
    assert table(tmp_path / "smoke")["pre_ln"]["status"] == "not run"

    fresh = cli("run", str(SMOKE), "--only", "baseline", "--set", "training.max_steps=30", *CHEAP, "--fresh",
                "--results", str(tmp_path))  # fmt: skip
    assert fresh.returncode == 0 and "started over (--fresh)" in fresh.stdout
    assert "note" not in result(tmp_path / "smoke", "baseline")


def test_a_run_whose_decoding_alone_changed_is_decoded_again_as_a_fresh_run_would_decode_it(tmp_path, smoke_run):
    """A finished run whose spec changed only in how its weights are decoded (rundir.DECODING) is decoded again from
    its last checkpoint, not retrained: the hypotheses, scores and logs of a run trained afresh with the new spec.
    The earlier result is set aside whole; decoding back, cut short before the new job.json, gives it again."""
    assert smoke_run.returncode == 0, smoke_run.stderr
    shutil.copytree(smoke_run.results, tmp_path / "again", dirs_exist_ok=True)
    root, seed = tmp_path / "again" / "smoke", tmp_path / "again" / "smoke" / "runs" / "baseline" / "seed-1"
    split = "hypotheses/test_2017_mscoco.txt"
    old, old_hypotheses = result(root, "baseline"), (seed / split).read_text()
    decoding = ["--set", "evaluation.beam_size=3", "--set", "evaluation.length_penalty_form=fairseq",
                "--set", "evaluation.length_penalty=1.0"]  # fmt: skip
    again = cli("run", str(SMOKE), "--only", "baseline", *decoding, "--results", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert ("only the decoding changed (evaluation.beam_size, evaluation.length_penalty, "
            "evaluation.length_penalty_form)") in " ".join(again.stdout.split())  # fmt: skip
    fresh = cli("run", str(SMOKE), "--only", "baseline", *decoding, "--results", str(tmp_path / "fresh"))
    assert fresh.returncode == 0, fresh.stderr
    new, trained = result(root, "baseline"), result(tmp_path / "fresh" / "smoke", "baseline")
    assert new["config_hash"] == trained["config_hash"] != old["config_hash"]
    assert new["resumed_from_step"] == new["steps"] == trained["steps"] == 150  # nothing was trained again
    assert new["scores"] == trained["scores"] != old["scores"]
    assert (seed / split).read_text() == (tmp_path / "fresh" / "smoke" / "runs" / "baseline" / "seed-1" / split
                                          ).read_text() != old_hypotheses  # fmt: skip
    assert losses(root, "baseline") == losses(tmp_path / "fresh" / "smoke", "baseline")

    def validations(directory):  # the end's validation logged once, as in a run trained once
        return [(v.step, v.valid_loss, v.averaged) for v in read_validations(directory)]

    assert validations(seed) == validations(tmp_path / "fresh" / "smoke" / "runs" / "baseline" / "seed-1")
    assert table(root)["baseline"]["note"].startswith("decoded again: only the decoding changed")
    kept = seed.with_name(f"seed-1.stale-{old['config_hash']}")
    assert json.loads((kept / "result.json").read_text()) == old and (kept / split).read_text() == old_hypotheses

    spec = json.loads((seed / "job.json").read_text())["spec"]
    assert decoding_changes(seed, spec | {"data": spec["data"] | {"test": ["test_2016_flickr"]}}) == ["data.test"]
    assert decoding_changes(seed, spec | {"training": spec["training"] | {"max_steps": 30}}) is None  # trains again
    assert decoding_changes(seed, spec | {"evaluation": spec["evaluation"] | {"average_checkpoints": 2}}) is None
    assert decoding_changes(seed, spec | {"evaluation": spec["evaluation"] | {"lowercase": True}}) is None  # valid BLEU

    # decoding back to smoke's own spec, cut short after last.json took its config but before job.json did
    set_aside_for_decoding(seed, old["config_hash"])
    back = cli("run", str(SMOKE), "--only", "baseline", "--results", str(tmp_path / "again"))
    assert back.returncode == 0, back.stderr
    assert "resumes from step 150" in " ".join(back.stdout.split())
    assert (seed / split).read_text() == old_hypotheses
    assert result(root, "baseline")["scores"] == old["scores"]


def test_a_run_cut_short_whose_decoding_alone_changed_goes_on_under_the_new_config(tmp_path):
    """A run not yet finished whose spec changed only in its decoding is not started over: training is the same
    under both specs, so it resumes from its checkpoint under the new config and ends as a run trained from the
    start with the new spec does. Nothing is set aside: nothing had finished."""
    args = [str(SMOKE), "--only", "baseline", "--results", str(tmp_path / "cut")]
    proc = start(*args)
    directory = tmp_path / "cut" / "smoke" / "runs" / "baseline" / "seed-1"
    deadline = time.monotonic() + 120
    while not losses_logged(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    step = json.loads((directory / "checkpoints" / "last.json").read_text())["step"]
    assert 0 < step < 150
    decoding = ["--set", "evaluation.beam_size=3"]
    planned = cli("run", *args, *decoding, "--dry-run")
    assert (f"only the decoding changed (evaluation.beam_size): resumes from step {step} under the new config"
            in " ".join(planned.stdout.split()))  # fmt: skip
    assert cli("run", *args, *decoding).returncode == 0
    fresh = cli("run", str(SMOKE), "--only", "baseline", *decoding, "--results", str(tmp_path / "fresh"))
    assert fresh.returncode == 0, fresh.stderr
    new, trained = result(tmp_path / "cut" / "smoke", "baseline"), result(tmp_path / "fresh" / "smoke", "baseline")
    assert new["config_hash"] == trained["config_hash"] and new["resumed_from_step"] == step
    assert new["scores"] == trained["scores"] and new["steps"] == trained["steps"] == 150
    assert losses(tmp_path / "cut" / "smoke", "baseline") == losses(tmp_path / "fresh" / "smoke", "baseline")
    assert [p.name for p in directory.parent.iterdir()] == ["seed-1"]


def test_seeds_give_mean_and_std_with_n(tmp_path, smoke_run):
    # smoke's own 150 steps: at 60, both seeds' BLEU could be 0.0 and the mean and sd would say nothing
    assert smoke_run.returncode == 0, smoke_run.stderr
    shutil.copytree(smoke_run.results, tmp_path, dirs_exist_ok=True)  # seed 1, trained once for the session
    run = cli("run", str(SMOKE), "--only", "baseline", "--seeds", "2", "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "1 to train" in run.stdout  # seed 2 alone
    root = tmp_path / "smoke"
    bleu = [result(root, "baseline", seed)["scores"]["test_2017_mscoco"]["bleu"] for seed in (1, 2)]
    assert bleu[0] != bleu[1] and min(bleu) > 0  # different seeds, different models
    row = table(root)["baseline"]
    assert row["n"] == "2"
    assert float(row["BLEU"]) == pytest.approx(sum(bleu) / 2, abs=0.006)
    assert float(row["BLEU std"]) == pytest.approx(abs(bleu[0] - bleu[1]) / 2**0.5, abs=0.006)
    assert f"{row['BLEU']} ± {row['BLEU std']}" in (root / "summary.md").read_text()


def test_dry_run_plans_and_trains_nothing(tmp_path):
    run = cli("run", "experiments/pe.yaml", "--seeds", "1,2", "--dry-run", "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    for expected in ["8 job(s), nothing trained", "positions=rotary", "5,489,664", "<= 1,024 a side", "8,000", "run"]:
        assert expected in run.stdout
    assert not any(tmp_path.iterdir())


def test_output_to_a_pipe_is_plain_text(smoke_run):
    run = smoke_run  # its output went to a pipe
    assert run.returncode == 0, run.stderr
    assert "\x1b[" not in run.stdout and "\r" not in run.stdout  # no colours, no redrawn lines
    assert "baseline/seed-1: started on cpu" in run.stdout and "baseline/seed-1: completed" in run.stdout


def test_two_gloo_processes_train_like_one(tmp_path):
    """The same global batch in 2 data-parallel processes on the CPU: the same losses and weights as in one."""
    # fp32: the test is of sharding. In bf16 (auto, on a CPU with native bf16) matmuls of other shapes round
    # differently, and 1 and 2 processes differ by more than the sharding's own round-off.
    args = [str(SMOKE), "--only", "baseline", "--set", "training.max_steps=40", "--set", "training.checkpoint_every=40",
            "--set", "training.precision=fp32"]  # fmt: skip
    one = cli("run", *args, "--results", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                          "ablate.cli", "run", *args, "--results", str(tmp_path / "two")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         preexec_fn=on_cores(ALL_CORES))  # fmt: skip
    assert two.returncode == 0, two.stderr
    assert result(tmp_path / "two" / "smoke", "baseline")["processes"] == 2
    a, b = losses(tmp_path / "one" / "smoke", "baseline"), losses(tmp_path / "two" / "smoke", "baseline")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 41))
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert x == pytest.approx(y, abs=2e-4)  # losses are logged to 4 decimals
    one_w, two_w = (
        torch.load(tmp_path / d / "smoke/runs/baseline/seed-1/checkpoints/last-40.pt", weights_only=False)["model"]
        for d in ("one", "two")
    )
    for name, w in one_w.items():
        other = two_w[name]
        if name.endswith(("w_qkv.bias", "w_kv.bias")):
            # The key bias adds a constant to every score of a query, which softmax ignores: its gradient is 0
            # in exact arithmetic, and Adam turns the round-off left in it into lr-sized steps. Left out.
            key = slice(32, 64) if "w_qkv" in name else slice(0, 32)
            w, other = w.clone(), other.clone()
            w[key] = other[key] = 0
        # Round-off differs between 1 process and 2 processes of 1 thread (gloo sums the
        # gradients), and 40 Adam steps carry it: measured at most 1e-6 on a Zen 4, 1.2e-4 on an Intel
        # Cascade Lake (the losses agree to their 4 logged decimals on both); with length buckets (more
        # padding, matmuls of other shapes) 5.9e-4 on an AMX Xeon, as much as between 1 and 2 threads in one
        # process there. A sharding bug moves weights by lr-sized steps (2e-3 a step here), 40 of them.
        torch.testing.assert_close(w, other, atol=1e-3, rtol=1e-4, msg=name)


def test_submitit_local_executor_round_trip(tmp_path):
    pytest.importorskip("submitit")
    args = [str(SMOKE), "--set", "training.max_steps=30", *CHEAP, "--results", str(tmp_path)]
    # both tasks start at once: one thread each, or they spend most of their time waiting for each other
    run = cli("run", *args, "--launcher", "submitit-local", "--time-min", "10", "--gpus-per-run", "0",
              env={"OMP_NUM_THREADS": "1"})  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "submitted 2 job(s)" in run.stdout
    rows = table(tmp_path / "smoke")
    assert rows["baseline"]["status"] == rows["pre_ln"]["status"] == "completed"
    assert list((tmp_path / "smoke" / "slurm").glob("*_result.pkl"))  # submitit's own record of each task
    again = cli("run", *args)  # collected locally, nothing trains again
    assert again.returncode == 0 and "0 to train" in again.stdout


def test_tensorboard_log_directory(tmp_path):
    pytest.importorskip("tensorboard")
    run = cli("run", str(SMOKE), "--only", "baseline", "--set", "training.max_steps=20", *CHEAP, "--results",
              str(tmp_path / "r"), "--tensorboard", str(tmp_path / "tb"))  # fmt: skip
    assert run.returncode == 0, run.stderr
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "smoke" / "baseline" / "seed-1"))
    events.Reload()
    loss = [e.value for e in events.Scalars("train/loss")]
    assert len(loss) == 20 and loss == pytest.approx([x for _, x in losses(tmp_path / "r" / "smoke", "baseline")])


def test_bad_flags_get_one_line(tmp_path):
    for args, expected in [
        (["--seeds", "x"], "ablate run: argument --seeds: expected a number of seeds or a list"),
        (["--only", "basline"], "--only: experiments/smoke.yaml has no run 'basline'; did you mean 'baseline'?"),
        (["--gpus-per-run", "2"], "--gpus-per-run 2: no GPU visible"),
        (["--device", "cuda"], "--device cuda: no GPU is visible"),
        (["--runs-per-gpu", "2", "--device", "cpu"], "--runs-per-gpu 2: the sweep trains on the CPU (--device cpu)"),
        (["--runs-per-gpu", "2", "--launcher", "slurm"], "--runs-per-gpu 2: with --launcher local only"),
        (["--runs-per-gpu", "0"], "ablate run: argument --runs-per-gpu: expected a positive"),
    ]:
        if args[0] in ("--gpus-per-run", "--device") and torch.cuda.is_available():
            continue  # these are errors only where no GPU is visible
        run = cli("run", "experiments/smoke.yaml", *args, "--results", str(tmp_path))
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
        assert run.stderr.startswith(expected)
    assert not any(tmp_path.iterdir())
