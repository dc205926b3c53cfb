"""GPU scheduling of the local launcher, with a fake list of visible GPUs handed to real CPU workers.

CI has no GPU (and few sessions are lent one), so the scheduler is tested with GPUs that are not there: the
launcher hands out their indices (CUDA_VISIBLE_DEVICES) and the workers, told to train on the CPU,
record what they were given and when they ran.
"""

import json
import subprocess
import sys
import time
from datetime import datetime
from itertools import combinations

import pytest
from rich.console import Console

from ablate.errors import UserError
from ablate.rundir import JOB, RESULT, RunLock
from ablate.sweep.devices import Resources, place, resources, visible_devices
from ablate.sweep.experiment import load_experiment
from ablate.sweep.launchers.local import LocalLauncher, Pool, wait_for_any
from ablate.sweep.plan import plan
from ablate.sweep.progress import SweepView
from ablate.sweep.runner import collect, prepare, prepare_data, write_results
from tests.conftest import ROOT

SMOKE = ROOT / "experiments" / "smoke.yaml"
PLUGIN = ROOT / "tests" / "fixtures" / "failing_part.py"


@pytest.fixture(autouse=True)
def _one_thread_a_worker(monkeypatch):
    """Each fake GPU's worker trains with one CPU thread: four workers of two threads each on two cores spend
    most of their time waiting for each other (430 s instead of about 60 for the four-at-once test)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def launch(tmp_path, write, name: str, variants: str, res: Resources, model: str = "{}", memory=lambda: None,
           held: str | None = None, meanwhile=lambda jobs: None):  # fmt: skip
    """Plans, prepares and launches a small experiment on `res` with the local launcher; returns its records, in
    plan order, the table and what the progress view printed. tests/test_cores.py launches on cores with it.
    `held`: a job (run/seed-n) whose lock this process holds during the launch, as another sweep would;
    `meanwhile(jobs)`: what happens between the launch and the summary (another sweep finishing a run)."""
    path = write(f"{name}.yaml", f"""
name: {name}
extends: {SMOKE}
plugins: [{PLUGIN}]
model: {model}
data: {{max_pairs: 100}}
training: {{max_steps: 40, validate_every: 40, checkpoint_every: null}}
evaluation: {{beam_size: 1, max_extra_len: 5}}
variants:
{variants}
""")  # fmt: skip
    experiment = load_experiment(path)
    planned = plan(experiment, tmp_path / "results")
    prepare_data([p.job for p in planned])
    for p in planned:
        prepare(p)
    jobs = [p.job for p in planned]
    log = tmp_path / "view.log"
    view = SweepView(Console(file=open(log, "w"), width=200), jobs)  # noqa: SIM115
    lock = RunLock(next(j.directory for j in jobs if j.label == held)) if held else None
    if lock is not None:
        assert lock.acquire(wait=False)
    try:
        outcomes = LocalLauncher(res, memory).launch(jobs, view)
    finally:
        view.close()
        if lock is not None:
            lock.release()
    meanwhile(jobs)
    records = [r.dump() for r in collect(planned, outcomes)]  # as each result.json reads
    _, frame, _ = write_results(experiment, tmp_path / "results", planned, outcomes)
    return records, frame, log.read_text()


def sweep(tmp_path, write, variants: str, gpus: list[int], per_run: int, model: str = "{}"):
    """Launches an experiment on fake GPUs; returns its records, in plan order, and the table."""
    records, frame, _ = launch(tmp_path, write, "gpus", variants, Resources(gpus, per_run, device="cpu"), model)
    return records, frame


def interval(record):
    return datetime.fromisoformat(record["started_at"]), datetime.fromisoformat(record["ended_at"])


def overlap(a, b) -> bool:
    (a0, a1), (b0, b1) = interval(a), interval(b)
    return a0 < b1 and b0 < a1


def most_at_once(records) -> int:
    events = sorted([(interval(r)[0], 1) for r in records] + [(interval(r)[1], -1) for r in records])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def check_schedule(records, gpus: list[int], per_run: int) -> None:
    slots = len(gpus) // per_run
    assert most_at_once(records) <= slots
    for record in records:  # each worker saw exactly the GPUs it was given, as many as a run takes
        assert len(record["gpu_ids"]) == per_run and set(record["gpu_ids"]) <= set(gpus)
        assert record["visible_gpus"] == ",".join(map(str, record["gpu_ids"]))
    for a, b in combinations(records, 2):  # jobs that ran at the same time held disjoint GPUs
        if overlap(a, b):
            assert not set(a["gpu_ids"]) & set(b["gpu_ids"]), (a["run"], b["run"])
    first = sorted(records, key=lambda r: interval(r)[0])
    for later in first[slots:]:  # once every GPU is taken, a job starts on GPUs a finished job handed back
        start = interval(later)[0]
        assert any(interval(r)[1] <= start and r["gpu_ids"] == later["gpu_ids"] for r in records), later["run"]


def test_one_gpu_a_run_four_at_once_with_disjoint_gpus(tmp_path, write):
    grid = "\n".join(f"  ff{d}: {{model.d_ff: {d}}}" for d in (48, 80, 96, 112))
    records, frame = sweep(tmp_path, write, grid, gpus=[0, 1, 2, 3], per_run=1)
    assert [r["status"] for r in records] == ["completed"] * 5
    check_schedule(records, [0, 1, 2, 3], 1)
    assert most_at_once(records) >= 2  # they did run side by side
    table = frame.set_index("run")
    for record in records:  # the table records each job's GPUs
        assert table.loc[record["run"], "GPUs"] == 1
        assert table.loc[record["run"], "GPU ids"] == str(record["gpu_ids"][0])


def test_two_gpus_a_run_under_torchrun_and_a_failed_job_frees_its_gpus(tmp_path, write):
    variants = "  breaks: {model.feedforward: broken_on_purpose}\n  ff48: {model.d_ff: 48}"
    records, frame = sweep(tmp_path, write, variants, gpus=[0, 1, 2, 3], per_run=2)
    assert [r["status"] for r in records] == ["completed", "failed", "completed"]
    check_schedule(records, [0, 1, 2, 3], 2)
    assert all(r.get("processes", 2) == 2 for r in records)  # torchrun: one process a GPU
    assert frame.set_index("run").loc["baseline", "GPU ids"] in ("0,1", "2,3")


def test_a_job_another_sweep_took_after_planning_is_left_to_it(tmp_path, write):
    """Two sweeps on one results folder plan the same jobs; when a job's turn comes and another process holds its
    lock, this sweep starts no worker for it (which would wait up to a minute for the lock) and leaves its
    job.json as the other wrote it; the rest train."""
    job_json = tmp_path / "results" / "held" / "runs" / "baseline" / "seed-1" / JOB
    records, _, log = launch(tmp_path, write, "held", "  ff48: {model.d_ff: 48}", Resources([0], 1, device="cpu"),
                             held="baseline/seed-1")  # fmt: skip
    assert [(r["run"], r["status"]) for r in records] == [("baseline", "busy"), ("ff48", "completed")]
    assert "baseline/seed-1: busy: another process is training this run" in log
    assert not (job_json.parent / "worker.log").exists() and '"gpu_ids": []' in job_json.read_text()


def test_a_run_another_sweep_finished_meanwhile_is_in_the_summary_as_it_finished(tmp_path, write):
    """Two queues on one experiment: this one skipped baseline/seed-1 as busy, and the other finished it before
    this one wrote its summary. The summary reads the run's result.json, not the 'busy' of the launch."""

    def finish_elsewhere(jobs):
        baseline, ff48 = (next(j for j in jobs if j.run == run) for run in ("baseline", "ff48"))
        record = json.loads((ff48.directory / RESULT).read_text())
        record |= {"run": "baseline", "arm": "baseline", "config_hash": baseline.config_hash}
        (baseline.directory / RESULT).write_text(json.dumps(record))

    records, frame, _ = launch(tmp_path, write, "held", "  ff48: {model.d_ff: 48}", Resources([0], 1, device="cpu"),
                               held="baseline/seed-1", meanwhile=finish_elsewhere)  # fmt: skip
    assert [(r["run"], r["status"]) for r in records] == [("baseline", "completed"), ("ff48", "completed")]
    assert list(frame["status"]) == ["completed", "completed"]
    summary = (tmp_path / "results" / "held" / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if line.startswith(("| baseline |", "| ff48 |"))]
    assert len(rows) == 2 and all("| completed |" in row for row in rows), summary


def test_a_failed_job_hands_its_gpu_to_the_next(tmp_path, write):
    broken = "{feedforward: broken_on_purpose}"  # the first job fails; the second needs its only GPU
    breaks, works = sweep(tmp_path, write, "  works: {model.feedforward: relu}", [5], 1, model=broken)[0]
    assert breaks["status"] == "failed" and works["status"] == "completed"
    assert works["gpu_ids"] == breaks["gpu_ids"] == [5]
    assert interval(breaks)[1] <= interval(works)[0]


def test_resources_are_checked_against_the_gpus_there_are():
    assert resources("auto", 2, visible=[0, 1, 2, 3]).parallel == 2
    assert resources("cpu", 1, visible=[0, 1]).gpus == []
    with pytest.raises(UserError, match="only 2 GPU"):
        resources("auto", 3, visible=[0, 1])
    with pytest.raises(UserError, match="no GPU is visible"):
        resources("cuda", 1, visible=[])
    shared = resources("auto", 1, visible=[0, 1], runs_per_gpu=3, cores=list(range(16)))
    assert shared.parallel == 6 and shared.threads_per_run == 2  # 16 cores shared out: torch would take all 16 each
    assert shared.describe() == "2 GPU(s) [0, 1], 1 a run, 3 runs a GPU (2 CPU thread(s) each), 6 run(s) at once"
    assert resources("auto", 1, visible=[0], runs_per_gpu=4, cores=[0, 1]).threads_per_run == 1
    with pytest.raises(UserError, match="--runs-per-gpu 2: only with one GPU a run"):
        resources("auto", 2, visible=[0, 1], runs_per_gpu=2)
    with pytest.raises(UserError, match=r"--runs-per-gpu 2: the sweep trains on the CPU \(--device cpu\)"):
        resources("cpu", 1, visible=[0, 1], runs_per_gpu=2)
    with pytest.raises(UserError, match="--runs-per-gpu 2: no GPU visible"):
        resources("auto", 1, visible=[], runs_per_gpu=2)
    with pytest.raises(ValueError, match="gpus_per_run 1"):
        Resources([0, 1], 2, runs_per_gpu=2)


def test_a_worker_sees_the_physical_gpu_under_the_sweeps_own_cuda_visible_devices():
    """Under CUDA_VISIBLE_DEVICES=2,3 torch's index 1 is physical GPU 3: the worker's mask must say 3, not 1."""
    assert visible_devices([1], "2,3") == "3" and visible_devices([0, 1], "2, 3") == "2,3"
    assert visible_devices([1], "GPU-aa,GPU-bb") == "GPU-bb"  # UUIDs too
    assert visible_devices([0, 2], None) == "0,2" and visible_devices([1], "") == "1"


def test_with_runs_per_gpu_each_job_goes_to_the_gpu_with_the_most_room():
    """Two GPUs, two runs a GPU: jobs alternate between them rather than fill one first; a fifth waits; a GPU a
    job hands back is the next one's."""
    pool, job = Pool(Resources([3, 1], 1, device="cpu", runs_per_gpu=2)), None
    taken = [pool.take(job, running) for running in range(4)]
    assert taken == [[1], [3], [1], [3]] and pool.take(job, 4) is None
    pool.give_back([3])
    assert pool.take(job, 3) == [3] and pool.take(job, 4) is None
    pool.give_back([1])
    pool.give_back([1])
    assert pool.take(job, 2) == [1] and pool.take(job, 3) == [1] and pool.take(job, 4) is None


def test_runs_sharing_a_gpu_train_side_by_side_and_the_table_marks_their_speed(tmp_path, write):
    """One GPU, two runs on it: they overlap, each saw that GPU, records how many could share it, and the table
    marks their speed cells as a shared GPU's (the pool's own test checks that no more than R share one)."""
    res = Resources([0], 1, device="cpu", runs_per_gpu=2)
    records, frame, _ = launch(tmp_path, write, "shared", "  ff48: {model.d_ff: 48}", res)
    assert [r["status"] for r in records] == ["completed"] * 2
    assert most_at_once(records) == 2
    assert all(r["gpu_ids"] == [0] and r["visible_gpus"] == "0" and r["runs_per_gpu"] == 2 for r in records)
    assert list(frame["runs a GPU"]) == [2, 2]
    from ablate.report.tables import cell

    row = frame.iloc[0].to_dict()
    assert cell("train tok/s", row["train tok/s"], row).endswith("†") and not cell("BLEU", 1.0, row).endswith("†")


def test_place_records_where_a_job_trains(tmp_path):
    experiment = load_experiment(SMOKE)
    job = plan(experiment, tmp_path)[0].job
    place(job, 2, [4, 7])
    assert (job.device, job.gpus, job.gpu_ids) == ("cuda", 2, [4, 7])
    place(job, 0)
    assert (job.device, job.gpus, job.gpu_ids) == ("cpu", 0, [])
    place(job, 1, [3], runs_per_gpu=4, threads=2)
    assert (job.gpu_ids, job.runs_per_gpu, job.threads) == ([3], 4, 2)


def test_the_sweep_sees_a_worker_end_when_it_ends_not_at_the_next_refresh():
    """wait_for_any returns as soon as one process has exited, long before its timeout; with none exiting it waits
    the whole timeout. (Generous bounds: this checks the behaviour, not a speed.)"""
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = time.monotonic()
        wait_for_any([slow, quick], timeout=60)
        assert time.monotonic() - start < 30 and quick.poll() == 0 and slow.poll() is None
        start = time.monotonic()
        wait_for_any([slow], timeout=0.3)
        assert time.monotonic() - start >= 0.3 and slow.poll() is None
    finally:
        slow.kill()
        slow.wait()
