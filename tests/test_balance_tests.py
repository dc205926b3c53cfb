"""scripts/balance_tests.py: the replay of xdist's loadfile scheduler, on seconds whose schedule is known."""

import importlib.util

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("balance_tests", ROOT / "scripts" / "balance_tests.py")
balance = importlib.util.module_from_spec(spec)
spec.loader.exec_module(balance)


def test_durations_sum_setup_call_and_teardown_by_file(tmp_path):
    log = tmp_path / "tests.log"
    log.write_text("""
============================= slowest durations ==============================
36.81s setup    tests/test_runner.py::test_a
33.31s call     tests/test_runner.py::test_a
0.50s teardown tests/test_runner.py::test_a
2.00s call     tests/test_check.py::test_b[15]
[gw0] [ 50%] PASSED tests/test_check.py::test_b[15]
""")  # fmt: skip
    tests = balance.durations(log)
    assert {f: dict(t) for f, t in tests.items()} == {"test_runner.py": {"test_a": 70.62},
                                                      "test_check.py": {"test_b[15]": 2.0}}  # fmt: skip


def test_a_worker_with_two_tests_left_takes_the_next_file_even_when_the_other_would_be_free_first():
    """A (two tests of 50 s), B (60), C (50), D (10): A to worker 0 and B to worker 1; worker 0, with 2 tests
    pending, takes C at once, and worker 1 takes D. Worker 1 is idle from 70 s while worker 0 runs to 150."""
    tests = {"A": {"a1": 50.0, "a2": 50.0}, "B": {"b": 60.0}, "C": {"c": 50.0}, "D": {"d": 10.0}}
    assert balance.replay(["A", "B", "C", "D"], tests) == [(150.0, ["A", "C"]), (70.0, ["B", "D"])]
    assert balance.replay(["B", "A", "C", "D"], tests)[0][1] == ["B", "C"]  # with A second, C goes to worker 0
    assert balance.collection_order(["C", "X"], ["A", "B", "C", "D"]) == ["C", "A", "B", "D"]
