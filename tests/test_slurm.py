"""The Slurm launcher's decisions, without a cluster: what a task asks for, how Slurm's answers read,
and how a task that ended without a result is reported. tests/test_slurm_cluster.py runs the real thing."""

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from ablate.errors import UserError
from ablate.record import Identity, Status
from ablate.sweep.experiment import SlurmSpec
from ablate.sweep.launchers import cluster, slurm
from ablate.sweep.launchers.cluster import Node
from ablate.sweep.launchers.slurm import Task, ended, resolve
from tests.conftest import ROOT, cli

SMOKE = ROOT / "experiments" / "smoke.yaml"


@pytest.fixture
def partition(monkeypatch):
    """Stands in for sinfo: set(nodes) makes the default partition `debug` hold those nodes."""
    monkeypatch.setattr(cluster, "require", lambda: None)

    def use(*nodes: Node, name: str = "debug"):
        def fake(asked):
            if asked not in (None, name):
                raise UserError(f"no partition '{asked}'")
            return name, list(nodes)

        monkeypatch.setattr(cluster, "nodes", fake)

    return use


def test_gres_parsing():
    assert cluster.gpus_of("(null)") == 0
    assert cluster.gpus_of("gpu:4") == 4
    assert cluster.gpus_of("gpu:a100:8(S:0-1),shard:16") == 8
    assert cluster.gpus_of("gpu:a100:2,gpu:v100:1") == 3


def test_a_cpu_cluster_gets_no_gpu_request_and_every_cpu_a_node_has(partition):
    partition(Node("n1", 2, 0), Node("n2", 16, 0))
    for device in ("cpu", "auto"):  # the defaults asked for a GPU and 8 CPUs, and pended forever
        s = resolve(SlurmSpec(), device, "slurm")
        assert (s.partition, s.gpus_per_run, s.cpus_per_run) == ("debug", 0, 2)
    with pytest.raises(UserError, match="has no GPU"):
        resolve(SlurmSpec(), "cuda", "slurm")
    with pytest.raises(UserError, match=r"at most 16.*pend forever"):
        resolve(SlurmSpec(cpus_per_run=32), "cpu", "slurm")
    assert resolve(SlurmSpec(cpus_per_run=1), "cpu", "slurm").cpus_per_run == 1


def test_a_gpu_cluster_gets_a_gpu_and_its_share_of_cpus(partition):
    partition(Node("g1", 32, 4), Node("g2", 64, 8), Node("c1", 128, 0))
    s = resolve(SlurmSpec(), "auto", "slurm")
    assert (s.gpus_per_run, s.cpus_per_run) == (1, 8)  # 32 CPUs / 4 GPUs on the smaller GPU node
    s = resolve(SlurmSpec(gpus_per_run=8), "cuda", "slurm")
    assert (s.gpus_per_run, s.cpus_per_run) == (8, 64)  # only g2 has 8 GPUs
    assert resolve(SlurmSpec(), "cpu", "slurm").gpus_per_run == 0
    with pytest.raises(UserError, match="at most 8 GPU"):
        resolve(SlurmSpec(gpus_per_run=16), "cuda", "slurm")
    with pytest.raises(UserError, match="trains on the CPU"):
        resolve(SlurmSpec(gpus_per_run=1), "cpu", "slurm")


def test_slurm_errors_read_as_one_line_naming_the_cause():
    down = "sinfo: error: slurm_load_partitions: Unable to contact slurm controller (connect failure)\n"
    assert cluster.explain("sinfo", down).startswith("the Slurm controller is unreachable (is slurmctld running?)")
    refused = "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification\n"
    assert cluster.explain("sbatch", refused) == "sbatch: error: Invalid generic resource (gres) specification"
    with pytest.raises(UserError, match="no Slurm here: nosuchcommand not on PATH"):
        cluster.run("nosuchcommand")


class Handle:
    """A submitit job handle that ended in a given Slurm state without a result."""

    def __init__(self, state: str, error: Exception):
        self.job_id, self.state, self.error = "7_1", state, error

    def result(self):
        raise self.error


def test_a_task_ended_by_slurm_says_why(tmp_path):
    job = SimpleNamespace(directory=tmp_path, config_hash="abc", identity=lambda: Identity(run="r", seed=1))
    s = SlurmSpec(time_min=30, max_timeouts=3)
    cancelled = ended(job, Handle("CANCELLED by 0", RuntimeError("has not produced any output")), s).dump()
    assert cancelled["status"] == Status.INTERRUPTED and "scancel" in cancelled["error"]
    assert not (tmp_path / "result.json").exists()  # resumable: no result written
    too_many = RuntimeError("Job not requeued because: timed-out too many times")
    timeout = ended(job, Handle("TIMEOUT", too_many), s).dump()
    assert timeout["status"] == Status.FAILED
    assert "time limit of 30 min after 3 requeue(s)" in timeout["error"] and "--time-min" in timeout["error"]
    assert "time limit" in (tmp_path / "result.json").read_text()
    memory = ended(job, Handle("OUT_OF_MEMORY", RuntimeError("oom")), s).dump()
    assert "out of memory" in memory["error"] and "mem_gb" in memory["error"]


def test_the_task_checkpoints_a_warned_worker_and_is_requeued(tmp_path, monkeypatch):
    """Slurm's warning (SIGUSR2) reaches the task and its worker; the worker stops, the task asks to be requeued."""
    worker = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                               "signal.signal(signal.SIGUSR2, lambda *a: sys.exit(130))\ntime.sleep(60)"],
                              start_new_session=True)  # fmt: skip
    time.sleep(0.5)
    task = Task(grace_s=20)
    task.worker = worker
    job = SimpleNamespace(directory=tmp_path, config_hash="abc")
    monkeypatch.setattr(slurm, "Job", SimpleNamespace(load=lambda path: job))
    again = task.checkpoint(str(tmp_path))
    assert worker.returncode == 130
    assert again is not None and again.args == (str(tmp_path),) and isinstance(again.function, Task)
    assert again.function.worker is None
    (tmp_path / "result.json").write_text('{"run": "r", "seed": 1, "config_hash": "abc", "status": "completed"}')
    task.worker = subprocess.Popen([sys.executable, "-c", "pass"])
    task.worker.wait()
    assert task.checkpoint(str(tmp_path)) is None  # it finished as the warning came: nothing to requeue


def test_without_slurm_one_line_and_exit_2(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    run = subprocess.run([sys.executable, "-m", "ablate.cli", "run", str(SMOKE), "--launcher", "slurm", "--results",
                          str(tmp_path)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0 and "no Slurm here" in run.stderr and "Traceback" not in run.stderr


def test_a_signal_before_the_worker_started_requeues(tmp_path, monkeypatch):
    job = SimpleNamespace(directory=tmp_path, config_hash="abc")
    monkeypatch.setattr(slurm, "Job", SimpleNamespace(load=lambda path: job))
    import submitit

    again = Task().checkpoint(str(tmp_path))  # no result.json: requeued, the same task on the same directory
    assert isinstance(again, submitit.helpers.DelayedSubmission) and isinstance(again.function, Task)
    assert again.args == (str(tmp_path),)


def test_cpus_flag_reaches_the_settings(tmp_path):
    run = cli("run", str(SMOKE), "--launcher", "slurm", "--cpus-per-run", "0", "--results", str(tmp_path))
    assert run.returncode == 2 and "cpus_per_run" in run.stderr and "Traceback" not in run.stderr
