"""The fork server: a worker forked from it starts as `python -m ablate.worker` would, computes what a fresh worker
computes, and its end is seen however it ends, the server's own death included.

The checks read the forked worker from outside, through /proc and its run directory, as the launcher does: its
session, cores, environment, working directory, parent and log; its threads and results against a fresh worker's.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.rundir import LOG, Exit, checkpoint_step, read_result
from ablate.sweep.devices import place
from ablate.sweep.experiment import load_experiment
from ablate.sweep.launchers.local import start_worker, worker_env
from ablate.sweep.plan import plan
from ablate.sweep.runner import prepare, prepare_data
from ablate.train.forkserver import Forked, ForkServer, NotForked
from tests.conftest import ALL_CORES, ROOT, cli

SMOKE = ROOT / "experiments" / "smoke.yaml"
PROBE = ROOT / "tests" / "fixtures" / "process_probe.py"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the fork server is Linux's")


def job_of(tmp_path: Path, write, steps: int, cores: list[int] | None):
    """The smoke experiment's baseline with the probe plugin, planned and prepared as the sweep does, to train
    `steps` steps pinned to `cores` (None: unpinned, torch's default threads)."""
    path = write("fork.yaml", f"""
name: fork
extends: {SMOKE}
plugins: [{PROBE}]
data: {{max_pairs: 200}}
training: {{max_steps: {steps}, validate_every: {steps}, checkpoint_every: {steps}}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
""")  # fmt: skip
    planned = [p for p in plan(load_experiment(path), tmp_path / "results") if p.job.label.startswith("baseline/")]
    prepare_data([planned[0].job])
    prepare(planned[0])
    job = planned[0].job
    place(job, 0, cpu_ids=cores)
    job.save()
    return job


def proc(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text()


def probed(job, server: ForkServer | None, probe: Path, monkeypatch) -> dict:
    """The probe's record of the worker the launcher starts for `job` (forked from `server`; fresh without one),
    trained to its end. The sweep sets two variables first, after the server started."""
    monkeypatch.setenv("ABLATE_PROBE", str(probe))
    monkeypatch.setenv("ABLATE_ADDED", "after the server")
    worker = start_worker(job, None, server)
    assert isinstance(worker, Forked) == (server is not None)
    assert worker.wait() == Exit.COMPLETED, (job.directory / LOG).read_text()
    (record,) = [json.loads(line) for line in probe.read_text().splitlines()]
    record["environment"].pop("ABLATE_PROBE")
    return record


def test_a_forked_worker_starts_as_a_fresh_one_would(tmp_path, write, monkeypatch):
    """Session, cores, working directory, environment, torch's threads, standard streams, signal handlers and the
    signal its parent's death sends: the same in a forked worker as in a fresh one, pinned or not. The server
    loads OpenMP with OMP_NUM_THREADS=1 and its own variable in its environment; the jobs have neither."""
    before = os.sched_getaffinity(0)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("ABLATE_SERVER_ONLY", "1")
    os.sched_setaffinity(0, ALL_CORES)  # an unpinned job takes every core the sweep has: all of them
    server = ForkServer()
    try:
        server.ensure_running()
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.delenv("ABLATE_SERVER_ONLY")
        cwd = tmp_path / "elsewhere"
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        for cores in (None, [ALL_CORES[-1]]):
            job = job_of(tmp_path / f"cores-{cores and cores[0]}", write, steps=2, cores=cores)
            fresh = probed(job, None, tmp_path / f"fresh-{cores}.jsonl", monkeypatch)
            (job.directory / "result.json").unlink()  # trained again
            forked = probed(job, server, tmp_path / f"forked-{cores}.jsonl", monkeypatch)
            assert forked == fresh
            assert fresh["own session"] and fresh["cwd"] == str(cwd)
            assert fresh["streams"] == [os.devnull, str(job.directory / LOG), str(job.directory / LOG)]
            assert fresh["environment"]["ABLATE_ADDED"] and "ABLATE_SERVER_ONLY" not in fresh["environment"]
            assert fresh["cores"] == (cores or ALL_CORES) and fresh["torch threads"] == len(cores or ALL_CORES)
            assert fresh["parent death signal"] == signal.SIGKILL
            assert fresh["command line"] == [sys.executable, "-m", "ablate.worker", str(job.directory)]
    finally:
        server.close()
        os.sched_setaffinity(0, before)


def test_a_forked_worker_stops_on_ctrl_c_and_dies_by_a_kill_or_with_the_server_and_the_next_starts_fresh(
    tmp_path, write
):
    """The sweep's Ctrl-C (SIGINT to the worker's process group) stops a forked worker after its current step, with a
    checkpoint there, as it stops a fresh one. A SIGKILL, of the worker or of the server, is seen as one; a worker
    does not outlive its server; and once the server is gone the launcher starts workers fresh."""
    job = job_of(tmp_path, write, steps=100_000, cores=[ALL_CORES[-1]])
    server = ForkServer()
    try:
        child = server.start(job, worker_env(job), job.cpu_ids)
        assert child.poll() is None and os.getsid(child.pid) == child.pid
        assert int(proc(child.pid, "status").split("PPid:\t")[1].split()[0]) == server.pid
        deadline = time.monotonic() + 120
        while "step" not in (job.directory / LOG).read_text() and time.monotonic() < deadline:
            time.sleep(0.2)  # training has begun
        os.killpg(child.pid, signal.SIGINT)
        assert child.wait() == Exit.INTERRUPTED
        assert 0 < checkpoint_step(job.directory, job.config_hash) < 100_000 and read_result(job.directory) is None

        child = server.start(job, worker_env(job), job.cpu_ids)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        child = server.start(job, worker_env(job), job.cpu_ids)
        os.kill(server.pid, signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}").exists() and "zombie" not in proc(child.pid, "status"):
            assert time.monotonic() < deadline, "the server's worker outlived it"
            time.sleep(0.1)
        with pytest.raises(NotForked):
            server.start(job, worker_env(job), job.cpu_ids)
        fresh = start_worker(job, None, server)
        assert isinstance(fresh, subprocess.Popen)
        fresh.kill()
        fresh.wait()
        assert "starting it fresh" in (job.directory / LOG).read_text()
    finally:
        server.close()


def test_forked_and_fresh_workers_train_the_same_numbers(tmp_path):
    """The same job, trained by `ablate run` with workers forked from a server forked from the command itself (the
    test suite's commands have the room on their command line), from a server started fresh (a command started
    fresh has not), and with fresh workers (ABLATE_FORKSERVER=0): every logged loss, the validation losses and the
    test scores the same, to the last bit. On one core, as under xdist: with two, torch's threads would keep the
    command from forking its workers' server (fork_here needs a process of one thread)."""
    measured = {}
    modes = {"forked from the server forked from the sweep:": ({}, "forked"),
             "forked from the fork server:": ({"ABLATE_WARM_CLI": "0"}, "forked"),
             f"{sys.executable} -m ablate.worker": ({"ABLATE_FORKSERVER": "0"}, "fresh")}  # fmt: skip
    for started, (env, worker) in modes.items():
        out = tmp_path / str(len(measured))
        done = cli("run", "experiments/smoke.yaml", "--only", "baseline", "--set", "training.max_steps=10", "--set",
                   "training.validate_every=10", "--set", "data.max_pairs=300", "--set", "evaluation.beam_size=1",
                   "--set", "evaluation.max_extra_len=5", "--results", str(out),
                   env=env, cores=ALL_CORES[:1])  # fmt: skip
        assert done.returncode == 0, done.stderr
        (run,) = out.glob("smoke/runs/*/seed-1")
        record = json.loads((run / "result.json").read_text())
        assert record["status"] == "completed" and record["worker"] == worker
        log = (run / LOG).read_text()
        assert started in log and (worker == "forked") == ("forked from" in log), log
        curve = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        measured[started] = (record["init_valid_loss"], record["valid_loss"], record["scores"],
                             [r.get("loss", r.get("valid_loss")) for r in curve])  # fmt: skip
    assert len({json.dumps(m) for m in measured.values()}) == 1, measured


def test_a_server_is_forked_from_the_sweep_only_where_it_runs_one_thread():
    """fork_here forks nothing while another thread runs (an OpenMP pool, a plugin's thread: what a fork would leave
    half-copied), and forks a server that starts workers once the process runs one thread again."""
    script = """
import os, sys, threading, time
from ablate.train import forkserver
assert forkserver.room() >= forkserver.ROOM
done = threading.Event()
thread = threading.Thread(target=done.wait)
thread.start()
forkserver.fork_here()
assert forkserver._forked_here is None, "forked beside a thread"
done.set()
thread.join()
forkserver.fork_here()
server = forkserver.ForkServer.for_sweep()
assert server.forked_here and server.pid
shown = lambda: (os.getsid(server.pid) == server.pid, open(f"/proc/{server.pid}/cmdline").read().split(chr(0))[:3])
deadline = time.monotonic() + 30
while shown() != (True, [sys.executable, "-m", "ablate.train.forkserver"]):  # in its own session, serving
    assert time.monotonic() < deadline, shown()
    time.sleep(0.05)
assert forkserver._forked_here is None and not forkserver.ForkServer.for_sweep().forked_here  # taken once
server.close()
print("ok")
"""
    one_core = lambda: os.sched_setaffinity(0, ALL_CORES[-1:])  # noqa: E731 (one core: no OpenBLAS pool)
    # its imports of torch._dynamo take 5 s alone; on a core that two other processes keep busy, over 120 s
    done = subprocess.run([sys.executable, "-c", script, " " * 4096], capture_output=True, text=True, timeout=600,
                          preexec_fn=one_core)  # fmt: skip
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


ENDINGS = [("raise ValueError('in the worker')", 1, "ValueError: in the worker"), ("sys.exit(3)", 3, ""),
           ("sys.exit('bad')", 1, "bad"), ("print('done', end='')", 0, "")]  # fmt: skip


@pytest.mark.parametrize(("body", "code", "said"), ENDINGS)
def test_a_forked_child_ends_as_a_fresh_python_would(body, code, said):
    """What a forked worker (or the server fork_here forked) raises ends it as it ends `python`: the traceback on
    stderr and code 1, SystemExit's code, buffered output flushed; never back into the code that forked it."""
    script = f"""
import os, sys
from ablate.train.forkserver import end_as_python_would
pid = os.fork()
if pid == 0:
    def body():
        {body}
    end_as_python_would(body)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    *said_lines, last = done.stderr.strip().splitlines() or [""]
    assert done.returncode == 0 and int(last) == code, done.stderr
    assert said in "\n".join(said_lines) and done.stdout == ("done" if code == 0 else "")


def test_exit_at_once_ends_as_a_normal_exit_would_for_what_matters():
    """exit_at_once skips tearing down the interpreter, not what a normal exit does that a run needs: a thread still
    writing is waited for, atexit's handlers run, buffered output reaches a pipe, and the exit code is the one
    given."""
    code = """if True:
        import atexit, threading, time
        from ablate.train.worker import exit_at_once
        atexit.register(lambda: print("atexit ran"))
        threading.Thread(target=lambda: (time.sleep(0.5), print("thread done"))).start()
        print("buffered", end=" ")
        exit_at_once(3)
    """
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["buffered", "thread", "done", "atexit", "ran"]


def test_the_tests_warm_cli_serves_one_test_after_another_from_one_server():
    """pytest sets PYTEST_CURRENT_TEST anew for every test; no library reads it as it loads, so a call from the next
    test is forked from the same server. Restarting it cost each test a torch import: the suite took 1,030 s rather
    than 567 s on 2 AVX2 cores. A variable torch does read still starts a fresh process."""
    from tests.fixtures.warm_cli import _unlike

    here = dict(os.environ)
    assert _unlike(here | {"PYTEST_CURRENT_TEST": "a.py::test_a (call)"},
                   here | {"PYTEST_CURRENT_TEST": "b.py::test_b (setup)"}) == ""  # fmt: skip
    assert _unlike(here | {"ABLATE_RESULTS": "x", "OMP_NUM_THREADS": "1"}, here) == ""
    assert _unlike(here | {"MKL_NUM_THREADS": "1"}, here | {"MKL_NUM_THREADS": "2"}) == "MKL_NUM_THREADS"
