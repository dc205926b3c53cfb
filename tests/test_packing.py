"""--runs-per-gpu auto: the probe's climb stops where doubling stops paying or the GPU's memory ends, and its
copies train the run side by side."""

import pytest

from ablate.sweep.packing import GAIN, MEMORY_SHARE, Level, best, climb, probe
from tests.conftest import ROOT


def measured(rates, mib=100.0):
    """A GPU whose summed steps a second at 1, 2, 4, ... runs are `rates`; the levels asked for are logged."""
    asked = []

    def measure(runs):
        asked.append(runs)
        return Level(runs, rates[runs.bit_length() - 1], mib)

    return measure, asked


def test_climb_doubles_while_the_sum_grows_and_stops_at_the_first_level_that_does_not():
    measure, asked = measured([40, 75, 140, 150, 300])
    levels = climb(measure, gpu_mib=100_000, most=64)
    assert asked == [1, 2, 4, 8]  # 150 < 1.1 × 140: 16 is never tried, though it would have paid
    assert best(levels).runs == 4


def test_climb_stops_before_a_level_that_would_not_fit_the_gpus_memory_or_exceed_the_jobs():
    measure, asked = measured([40, 75, 140, 280, 560], mib=1_000.0)
    climb(measure, gpu_mib=8 * 1_000 / MEMORY_SHARE - 1, most=64)  # 8 runs of 1,000 MiB do not fit
    assert asked == [1, 2, 4]
    measure, asked = measured([40, 75, 140, 280, 560])
    climb(measure, gpu_mib=100_000, most=6)  # 6 jobs: 1, 2, 4, then all 6
    assert asked == [1, 2, 4, 6]


def test_best_takes_the_fewest_runs_within_the_gain_of_the_top():
    levels = [Level(1, 40, 1), Level(2, 75, 1), Level(4, 140, 1), Level(8, 150, 1)]
    assert best(levels).runs == 4 and GAIN * 140 > 150
    assert best([Level(1, 40, 1), Level(2, 100, 1)]).runs == 2


def test_a_probe_trains_its_copies_side_by_side_and_sums_their_rates():
    """The mechanics on the CPU (the GPU's memory is then each copy's reserved bytes, none)."""
    level = probe(str(ROOT / "experiments" / "smoke.yaml"), [], "baseline", 2, 0, "cpu", 1.0)
    assert level.runs == 2 and level.steps_per_s > 0


def test_a_copy_that_fails_gets_one_line_naming_why(tmp_path):
    from ablate.errors import UserError

    with pytest.raises(UserError, match=r"a probe of nope failed: .*smoke\.yaml: no run 'nope'"):
        probe(str(ROOT / "experiments" / "smoke.yaml"), [], "nope", 1, 0, "cpu", 1.0)
