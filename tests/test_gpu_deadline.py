"""scripts/gpu_queues.py's deadline rule (scripts/gpu_jobs.py uses it too), on looks whose arithmetic is known."""

import importlib.util
import sys
from pathlib import Path

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_queues", ROOT / "scripts" / "gpu_queues.py")
queues = importlib.util.module_from_spec(spec)
sys.modules["gpu_queues"] = queues  # its dataclass looks its module up there
spec.loader.exec_module(queues)


def job(name: str, *looks: tuple[float, int], steps: int = 8000):
    return queues.Job(Path(name), 0, steps, list(looks))


def test_enough_capacity_stops_nothing():
    """Two jobs at 10 steps/s each (60 s of looks), 1,000 steps left each, 100 s left: 2,000 steps fit exactly."""
    jobs = [job("a", (0, 6400), (60, 7000)), job("b", (0, 6400), (60, 7000))]
    assert queues.beyond_time(jobs, 100.0) == []


def test_short_capacity_stops_only_the_least_advanced():
    """Three jobs at 10 steps/s each (30 steps/s in all), 60 s left: 1,800 steps fit and 1,000 + 1,500 + 2,000
    are left. The rule of 2026-11-26 stopped two of them at once (the 1,500 and the 2,000); now one, the least
    advanced, and the next decision waits GAP seconds for the rates of the jobs left."""
    a = job("a", (0, 6400), (60, 7000))
    b = job("b", (0, 5900), (60, 6500))
    c = job("c", (0, 5400), (60, 6000))
    assert queues.beyond_time([a, b, c], 60.0) == [c]
    assert queues.GAP >= 60.0  # Job.rate's window: the next decision sees the new mix's rates only


def test_no_stop_while_a_job_pauses_to_decode():
    """Every job at step 2,000 on two looks (decoding at the budget point): the sum of the rates reads low (the
    third lease's cascade began so), and the rule waits for the look after."""
    paused = [job(n, (0, 1500), (40, 2000), (60, 2000)) for n in "abcd"]
    assert all(j.paused() for j in paused)
    assert queues.beyond_time(paused, 10.0) == []
    one = [job("a", (0, 1500), (40, 2000), (60, 2000)), job("b", (0, 1500), (40, 1900), (60, 2200))]
    assert queues.beyond_time(one, 10.0) == []  # one paused job is enough to wait
    moving = [job("a", (0, 1500), (40, 1900), (60, 2100)), job("b", (0, 1500), (40, 1900), (60, 2200))]
    assert not any(j.paused() for j in moving)
    assert queues.beyond_time(moving, 10.0) == [moving[0]]


def test_a_job_at_its_cap_is_finishing_not_paused():
    """A job whose steps reached the cap decodes test2016 before its result: it holds no decision back."""
    done = job("a", (0, 7900), (40, 8000), (60, 8000))
    assert not done.paused()
    late = job("b", (0, 1000), (40, 1400), (60, 1600))
    assert queues.beyond_time([done, late], 30.0) == [late]
