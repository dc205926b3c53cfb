"""CPU cores as a resource: the local launcher pins runs side by side to disjoint cores, as it hands out GPUs.

The pool is tested as the GPU pool is (tests/test_launchers.py): real CPU workers, each recording the cores
the kernel let it run on (sched_getaffinity) and its threads, and when it ran.
"""

import json
import os
from itertools import combinations

import pytest

from ablate.sweep.devices import Resources, default_threads, resources
from ablate.sweep.launchers.local import Pool
from ablate.train.job import Job
from tests.conftest import ALL_CORES, ROOT, cli
from tests.test_launchers import SMOKE, interval, launch, most_at_once, overlap

CORES = ALL_CORES  # the machine's, not this xdist worker's share (tests/conftest.py)
two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to pin two runs apart")


def sweep(tmp_path, write, variants: str, res: Resources, model: str = "{}", memory=lambda: None):
    """Launches a small experiment on `res`'s cores; its records in plan order, the table, the view."""
    return launch(tmp_path, write, "cores", variants, res, model, memory)


@two_cores
def test_one_core_a_run_two_at_once_on_disjoint_cores_and_a_freed_core_goes_to_the_next(tmp_path, write):
    variants = "\n".join(f"  ff{d}: {{model.d_ff: {d}}}" for d in (48, 80))
    cores = CORES[:2]
    records, frame, _ = sweep(tmp_path, write, variants, Resources(cpus=cores, threads_per_run=1))
    assert [r["status"] for r in records] == ["completed"] * 3
    assert most_at_once(records) == 2  # side by side, never more than the cores allow
    for record in records:  # each worker ran on exactly the one core it was given, with one thread
        assert record["threads"] == 1 and len(record["cpu_ids"]) == 1 and record["cpu_ids"][0] in cores
        assert Job.load(tmp_path / "results" / "cores" / "runs" / record["run"] / "seed-1").cpu_ids == record["cpu_ids"]
    for a, b in combinations(records, 2):
        if overlap(a, b):
            assert a["cpu_ids"] != b["cpu_ids"], (a["run"], b["run"])
    third = max(records, key=lambda r: interval(r)[0])  # started once a run ended, on the core it handed back
    assert any(interval(r)[1] <= interval(third)[0] and r["cpu_ids"] == third["cpu_ids"] for r in records)
    table = frame.set_index("run")
    assert {table.loc[r["run"], "cores"] for r in records} == {str(c) for c in cores}


@two_cores
def test_a_failed_run_frees_its_core_and_the_others_complete(tmp_path, write):
    variants = "  breaks: {model.feedforward: broken_on_purpose}\n  works: {model.d_ff: 48}"
    records, _, _ = sweep(tmp_path, write, variants, Resources(cpus=CORES[:1], threads_per_run=1))
    assert [r["status"] for r in records] == ["completed", "failed", "completed"]
    assert "this part fails on purpose" in records[1]["error"]
    assert most_at_once(records) == 1  # one core: one at a time, each starting on the core the last gave back
    assert all(r["cpu_ids"] == CORES[:1] for r in (records[0], records[2]))


@two_cores
def test_no_run_starts_while_memory_is_short_unless_nothing_else_runs(tmp_path, write):
    records, _, view = sweep(tmp_path, write, "  ff48: {model.d_ff: 48}", Resources(cpus=CORES[:2], threads_per_run=1),
                             memory=lambda: 1.0)  # fmt: skip
    assert [r["status"] for r in records] == ["completed"] * 2
    assert most_at_once(records) == 1  # two free cores, but 1 MiB free: the second waited for the first
    assert "waiting for memory: 1 MiB available" in view


def test_the_pool_hands_out_disjoint_cores_and_takes_them_back():
    pool = Pool(Resources(cpus=[0, 1, 2, 3], threads_per_run=2))
    job = Job("e", "r", 1, ROOT, {}, {}, "-", [], "h")
    first, second = pool.take(job, 0), pool.take(job, 1)
    assert first == [0, 1] and second == [2, 3] and pool.take(job, 2) is None
    pool.give_back(first)
    assert pool.take(job, 1) == [0, 1]
    pinned = Job("e", "r", 1, ROOT, {}, {}, "-", [], "h", threads=3)  # a reference pins its threads: it takes three
    assert Pool(Resources(cpus=[0, 1, 2, 3], threads_per_run=1)).take(pinned, 0) == [0, 1, 2]
    assert Pool(Resources()).take(job, 0) == [] and Pool(Resources()).take(job, 1) is None  # unpinned: one at a time


def test_the_default_trains_as_many_runs_side_by_side_as_there_are_jobs_and_cores():
    assert default_threads(jobs=1, cores=2) == 2  # a single run takes every core
    assert default_threads(jobs=2, cores=2) == 1  # two runs of one thread: 1.33x the runs an hour (Zen 4)
    assert default_threads(jobs=7, cores=2) == 1
    assert default_threads(jobs=3, cores=16) == 5
    res = resources("cpu", 1, jobs=4, cores=[0, 1])
    assert (res.cpus, res.threads_per_run, res.parallel) == ([0, 1], 1, 2)
    assert "the most runs an hour" in res.describe() and "2 runs at once, 1 thread(s) each" in res.describe()
    assert resources("cpu", 1, threads_per_run=2, jobs=4, cores=[0, 1]).parallel == 1
    assert resources("cpu", 1, jobs=4, cores=[3]).describe() == "CPU (1 core), one run at a time, 1 thread(s) each"


def test_threads_per_run_is_checked_in_one_line(tmp_path):
    too_many = cli("run", str(SMOKE), "--threads-per-run", "999", "--results", str(tmp_path), cores=CORES)
    assert too_many.returncode == 2
    assert too_many.stderr.strip().splitlines() == [
        f"--threads-per-run: expected 1 to {len(CORES)} (the cores this process may use), got 999"
    ]
    zero = cli("run", str(SMOKE), "--threads-per-run", "0", "--results", str(tmp_path))
    assert zero.returncode == 2 and "--threads-per-run: expected a positive whole number, got 0" in zero.stderr
    assert not (tmp_path / "smoke").exists()  # nothing written


@two_cores
def test_ablate_run_trains_two_runs_at_once_without_flags_and_says_so(tmp_path):
    """Through the CLI: on 2 cores, a sweep of 2 jobs runs side by side, one core each, and the plan says so."""
    run = cli("run", str(SMOKE), "--set", "training.max_steps=30", "--set", "data.max_pairs=200",
              "--set", "evaluation.beam_size=1", "--results", str(tmp_path), cores=CORES)  # fmt: skip
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[0]
    assert f"CPU ({len(CORES)} cores), 2 runs at once, {len(CORES) // 2} thread(s) each" in first
    assert "the most runs an hour" in first
    from ablate.report.results import load_results

    jobs = [j for jobs in load_results(tmp_path / "smoke").runs.values() for j in jobs]
    assert len(jobs) == 2 and not set(jobs[0].result.cpu_ids) & set(jobs[1].result.cpu_ids)
    assert all(0.0 <= j.result.core_share <= 1.0 for j in jobs)


@two_cores
def test_a_resumed_run_keeps_its_threads_and_the_plan_says_so_when_the_sweep_gives_others(tmp_path):
    """A run trained on one thread, resumed under --threads-per-run 2: it trains on one thread (its round-off
    depends on them), and the plan says so; job.json's `threads: null` lets the sweep give it two."""
    args = [str(SMOKE), "--only", "baseline", "--set", "training.max_steps=20", "--set", "training.checkpoint_every=10",
            "--set", "evaluation.beam_size=1", "--set", "evaluation.max_extra_len=5", "--set", "data.max_pairs=200",
            "--results", str(tmp_path)]  # fmt: skip
    d = tmp_path / "smoke" / "runs" / "baseline" / "seed-1"

    def resumed_on(threads: int):
        (d / "result.json").unlink()  # stopped after its last checkpoint: the sweep resumes it
        return cli("run", *args, "--threads-per-run", str(threads), cores=CORES[:2])

    first = cli("run", *args, "--threads-per-run", "1", cores=CORES[:2])
    assert first.returncode == 0, first.stderr
    again = resumed_on(2)
    assert again.returncode == 0, again.stderr
    assert "baseline/seed-1: resumes from step 20" in again.stdout
    assert ("baseline/seed-1: keeps the 1 thread(s) it trained on, not the sweep's 2: its round-off depends on them; "
            "`threads: null` in its job.json lets the sweep choose") in again.stdout  # fmt: skip
    assert Job.load(d).threads == 1 and len(Job.load(d).cpu_ids) == 1
    same = resumed_on(1)
    assert same.returncode == 0 and "it trained on" not in same.stdout  # nothing to say when the counts agree
    job = json.loads((d / "job.json").read_text())
    (d / "job.json").write_text(json.dumps({**job, "threads": None}))
    freed = resumed_on(2)
    assert freed.returncode == 0 and "it trained on" not in freed.stdout
    assert Job.load(d).threads == 2 and len(Job.load(d).cpu_ids) == 2


def test_core_share_sees_another_process_running_on_the_cores():
    """A process pinned to a core that another process keeps busy is told it had little of that core."""
    import subprocess
    import sys

    core = CORES[0]
    spin = "import time\nend = time.time() + 120\nwhile time.time() < end: pass"  # killed once measured
    burner = subprocess.Popen([sys.executable, "-c", spin], preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    code = (
        f"import os, time\nfrom ablate.train.device import CoreShare\nos.sched_setaffinity(0, {{{core}}})\n"
        "share = CoreShare()\ntime.sleep(0.3)\nshare.start()\ntime.sleep(1.5)\nprint(share.stop())"
    )
    try:
        measured = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    finally:
        burner.kill()
    assert float(measured.stdout) < 0.5  # the burner had the core; this process did not


def test_the_table_marks_the_speed_of_a_run_that_shared_its_cores(tmp_path):
    from ablate.record import RunResult, Status
    from ablate.report.frame import report_frame
    from ablate.report.results import from_records
    from ablate.report.tables import display

    def record(run, share):
        return RunResult(
            run=run,
            seed=1,
            status=Status.COMPLETED,
            train_src_tokens_per_s=500.0,
            train_tgt_tokens_per_s=500.0,
            wall_seconds=10.0,
            core_share=share,
            cpu_ids=[0],
        )

    frame, notes = report_frame(from_records("e", tmp_path, [record("baseline", 0.99), record("busy", 0.4)]), "none")
    columns, rows = display(frame)
    speed, wall = columns.index("train tok/s"), columns.index("wall s")
    assert rows[0][speed] == "1,000" and rows[1][speed] == "1,000†" and rows[1][wall] == "10.0†"
    assert rows[1][columns.index("core share")] == "40.0%"
    assert any(note.startswith("† busy: other processes ran on the run's cores") for note in notes)
