"""`ablate run --launcher slurm` against a real Slurm: the single-node cluster of scripts/slurm-single-node,
which CI starts before the tests. Without one, these tests skip and say so.

They cover what a user meets: defaults that fit a CPU-only cluster, a task that pends shown with
Slurm's reason, a second run that submits nothing, Ctrl-C leaving the jobs and saying how to cancel
them, `scancel` (exit 130) and the resume after it, one-line errors for a controller that does not
answer and a request sbatch refuses, and a time limit that checkpoints and requeues, after which the
table equals that of an uninterrupted run.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

SMOKE = ROOT / "experiments" / "smoke.yaml"


def _cluster() -> str | None:
    """Why these tests cannot run here, or None when a Slurm cluster answers with an idle node."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "no Slurm here (sbatch, sinfo not on PATH); start one with: sudo scripts/slurm-single-node up"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the Slurm controller does not answer (sinfo timed out)"
    if out.returncode != 0:
        return f"the Slurm controller does not answer: {out.stderr.strip()}"
    if not {"idle", "mix", "alloc"} & set(out.stdout.split()):
        return f"no Slurm node is up (sinfo: {out.stdout.split()})"
    return None


WHY_NOT = _cluster()
if WHY_NOT is not None and os.environ.get("ABLATE_REQUIRE_SLURM"):  # CI started a cluster: it must be there
    raise RuntimeError(f"ABLATE_REQUIRE_SLURM is set, but {WHY_NOT}")
# One node: these tests would queue behind each other; pyproject's --dist loadfile keeps them in one xdist worker.
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


def ablate(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def start(*args: str, stdout: Path | None = None) -> subprocess.Popen:
    """`ablate ARGS` in the background; its output to a pipe, or to the file `stdout` to read as it runs."""
    if stdout is None:
        return subprocess.Popen([sys.executable, "-m", "ablate.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
    with open(stdout, "w") as out:  # the child keeps its own handle
        return subprocess.Popen([sys.executable, "-m", "ablate.cli", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip


def rows(root: Path) -> dict[str, dict]:
    import csv

    with open(root / "summary.csv", encoding="utf-8") as f:
        return {r["run"]: r for r in csv.DictReader(line for line in f if not line.startswith("#"))}


def slurm_job(run_dir: Path) -> str:
    return json.loads((run_dir / "slurm.json").read_text())["job_id"]


def arrays_submitted(results: Path) -> int:
    return len(list(results.rglob("*_submission.sh")))  # submitit writes one script an array


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(1)


def step_of(run_dir: Path) -> int:
    info = run_dir / "checkpoints" / "last.json"
    return json.loads(info.read_text())["step"] if info.is_file() else 0


def state(job_id: str) -> str:
    """The job's state as the controller has it now (squeue; sacct, fed by slurmdbd, can lag behind)."""
    out = subprocess.run(["squeue", "-h", "-r", "-j", job_id.split("_")[0], "-o", "%i|%T"], capture_output=True,
                         text=True).stdout  # fmt: skip
    return next((line.split("|")[1] for line in out.splitlines() if line.startswith(job_id + "|")), "")


@pytest.fixture
def results(tmp_path):
    """A results directory; any job left on the cluster is cancelled afterwards."""
    yield tmp_path
    ids = [json.loads(p.read_text())["job_id"] for p in tmp_path.rglob("slurm.json")]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


def test_submit_follow_and_collect_with_defaults_that_fit_the_cluster(results):
    """No flags: no GPU asked of a CPU-only cluster, and as many CPUs as a node has, so the 2 tasks take
    turns on this one node; the second pends with Slurm's reason. Then a second command while they are
    queued submits nothing, and a third, once they ended, trains nothing."""
    args = ["run", str(SMOKE), "--launcher", "slurm", "--results", str(results)]
    first = ablate(*args, "--no-wait")
    assert first.returncode == 0, first.stderr
    assert "submitted 2 job(s)" in first.stdout and "no GPU" in first.stdout
    follow = ablate(*args)
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert "submitted" not in follow.stdout and "not submitting them again" in follow.stdout
    assert "pending: Resources" in follow.stdout  # one node of 2 CPUs, 2 CPUs a task: one task waits
    assert arrays_submitted(results) == 1
    table = rows(results / "smoke")
    assert table["baseline"]["status"] == table["pre_ln"]["status"] == "completed"
    result = json.loads((results / "smoke/runs/baseline/seed-1/result.json").read_text())
    assert result["slurm_job"] == slurm_job(results / "smoke/runs/baseline/seed-1")
    again = ablate(*args)
    assert again.returncode == 0 and "0 to train" in again.stdout and "submitted" not in again.stdout
    assert arrays_submitted(results) == 1


def test_ctrl_c_leaves_the_jobs_and_says_how_to_cancel_them_then_scancel_and_resume(results, write):
    """Ctrl-C without a terminal to ask on leaves the jobs running and prints the scancel command; a
    scancelled task ends the following command with 130; the next command resumes it from its checkpoint."""
    spec = write("long.yaml", f"""
name: long
extends: {SMOKE}
training: {{max_steps: 600, validate_every: 300, checkpoint_every: 100}}
""")  # fmt: skip
    args = ["run", str(spec), "--only", "baseline", "--launcher", "slurm", "--cpus-per-run", "1", "--results",
            str(results)]  # fmt: skip
    run_dir = results / "long/runs/baseline/seed-1"
    following = start(*args)
    wait_for(lambda: step_of(run_dir) >= 100, 240, "a first checkpoint")
    following.send_signal(signal.SIGINT)
    out, err = following.communicate(timeout=60)
    assert following.returncode == 130, out + err
    job = slurm_job(run_dir)
    assert f"scancel {job.split('_')[0]}" in err and "left 1 Slurm job(s)" in err, out + err
    assert state(job) == "RUNNING", out + err  # left running, as it said

    said = results / "following.txt"
    following = start(*args, stdout=said)  # follows the job left running; then it is cancelled from outside
    # Cancelled only once it is followed: the job trains on meanwhile, and a scancel before the command has
    # found it would leave it nothing to follow (it would resume the run as a new job).
    wait_for(lambda: "not submitting them again" in said.read_text(), 120, "following the job left running")
    wait_for(lambda: step_of(run_dir) >= 200, 240, "a later checkpoint")
    subprocess.run(["scancel", job], check=True)
    _, err = following.communicate(timeout=120)
    out = said.read_text()
    assert following.returncode == 130, out + err
    assert "interrupted runs" in err and "cancelled (scancel)" in err
    assert arrays_submitted(results) == 1
    stopped_at = step_of(run_dir)
    assert stopped_at >= 200

    resumed = ablate(*args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumes from step {stopped_at}" in resumed.stdout and "submitted 1 job(s)" in resumed.stdout
    assert rows(results / "long")["baseline"]["status"] == "completed"


def test_a_time_limit_checkpoints_requeues_and_ends_as_one_whole_run(results, write):
    """A 1-minute limit, with Slurm's warning 1 s before it (sent up to 30 s earlier: Slurm checks limits
    every 30 s), for a run of 62 s of training steps: each warning makes the worker save a checkpoint, submitit
    requeues the task, and it resumes there. The run ends as one: every step logged once, its validations and its
    test translations, on the task's one thread. That a run resumed after the warning trains the numbers of one
    trained in one go is tests/test_stopping.py's (the warning's signal sent to the same worker, no cluster) and
    tests/test_runner.py's kill -9 tests; here, what only a real cluster shows. Its length is in seconds
    (`training.max_seconds`, which counts the steps of both jobs), so that on every CPU the warning, at most 59 s
    after the job started, comes while it trains: 2,000 steps of 2,000-token batches took 126 s of the test on an
    AVX2 EPYC, while on a Zen 4 1,200 of them and the decoding had ended in under a minute, before the warning."""
    spec = write("limit.yaml", f"""
name: limit
extends: {SMOKE}
training: {{max_steps: null, max_seconds: 62, max_tokens: 2000, validate_every: 500, checkpoint_every: 500}}
slurm: {{time_min: 1, signal_delay_s: 1, max_timeouts: 12, cpus_per_run: 1}}
""")  # fmt: skip
    done = ablate("run", str(spec), "--only", "baseline", "--launcher", "slurm", "--results", str(results), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = results / "limit/runs/baseline/seed-1"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["slurm_restarts"] >= 1  # it was requeued after the time limit's warning, at least once
    steps, resumed = result["steps"], result["resumed_from_step"]
    assert result["status"] == "completed" and result["stopped_by"] == "max_seconds" and 0 < resumed < steps
    assert result["threads"] == 1  # the task's one CPU, in the first job and the requeued one
    log = "".join(p.read_text() for p in (results / "limit/slurm").glob("*_log.*"))
    assert "this job is timed-out" in log and "Requeued job" in log
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "loss" in line] == list(range(1, steps + 1))  # each step once
    assert [line["step"] for line in lines if "valid_loss" in line] == [0, *range(500, steps, 500), steps]
    hypotheses = (run_dir / "hypotheses/test_2017_mscoco.txt").read_text().splitlines()  # smoke's test set
    assert len(hypotheses) == 461 and rows(results / "limit")["baseline"]["BLEU"]


def test_slurm_failures_are_one_line(results, write):
    args = ["run", str(SMOKE), "--launcher", "slurm", "--results", str(results)]
    down = write("down.conf", (Path("/etc/slurm/slurm.conf").read_text() + "\nSlurmctldPort=1\n"))
    no_controller = ablate(*args, env=dict(os.environ, SLURM_CONF=str(down)), timeout=180)
    assert no_controller.returncode == 2
    assert no_controller.stderr.count("\n") == 1 and "Traceback" not in no_controller.stderr
    assert "controller is unreachable" in no_controller.stderr

    refused = ablate(*args, "--slurm", "constraint=no_such_feature")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "the cluster refused the jobs: sbatch: error:" in refused.stderr and "Traceback" not in refused.stderr

    partition = ablate(*args, "--partition", "nope")
    assert partition.returncode == 2 and "no partition 'nope'" in partition.stderr
    assert not list(results.rglob("slurm.json"))  # nothing was submitted
