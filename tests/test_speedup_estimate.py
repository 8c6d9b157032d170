"""The benchmark's statistics: the median ratio of alternating rounds, its order-statistic
interval, and when no figure is claimed (engine/verify/speedup_estimate.py)."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytpu.engine.verify import speedup_estimate
from pytpu.engine.verify.speedup_estimate import estimate, median_interval

ratios = st.lists(st.floats(0.01, 100, allow_nan=False), min_size=2, max_size=15)


@given(ratios)
def test_the_interval_holds_the_median_and_comes_from_the_rounds(values):
    interval = median_interval(values)
    assert interval.low <= statistics.median(values) <= interval.high
    assert interval.low in values and interval.high in values
    assert 0 < interval.confidence <= 1


@pytest.mark.parametrize(
    ("n", "confidence"), [(2, 0.5), (3, 0.75), (4, 0.875), (5, 0.9375), (9, 0.9609)]
)
def test_the_coverage_of_n_rounds(n, confidence):
    assert median_interval([float(i) for i in range(1, n + 1)]).confidence == confidence


def test_more_rounds_narrow_the_interval_to_inner_order_statistics():
    interval = median_interval([float(i) for i in range(1, 10)])  # 9 rounds: the 2nd and 8th
    assert (interval.low, interval.high) == (2.0, 8.0)


def test_the_interval_covers_the_true_median_as_often_as_it_says():
    """Rounds drawn from a skewed distribution whose median is 1: the 5-round interval holds it
    in about 94% of runs."""
    rng = random.Random(7)
    runs = 4000
    held = 0
    for _ in range(runs):
        values = [rng.lognormvariate(0, 0.3) for _ in range(5)]
        interval = median_interval(values)
        held += interval.low <= 1.0 <= interval.high
    assert held / runs == pytest.approx(0.9375, abs=0.02)


def test_steady_rounds_on_an_idle_machine_give_a_figure():
    result = estimate([0.68, 0.7, 0.69, 0.71, 0.66], [0.02, 0.0, 0.05, 0.01, 0.03], cores=2)
    assert result.speedup == 0.69 and result.refused is None
    assert (result.interval.low, result.interval.high) == (0.66, 0.71)


def test_a_busy_machine_gives_no_figure():
    result = estimate([0.68, 0.7, 0.69, 0.71, 0.66], [1.9, 2.0, 1.8, 2.0, 1.9], cores=2)
    assert result.speedup == 0.69
    assert result.refused.startswith("other processes used 1.9 of the machine's 2 CPU cores")


def test_too_few_rounds_or_too_wide_an_interval_give_no_figure():
    assert "2 rounds cannot bound the speedup" in estimate([0.7, 0.71], [0, 0], 2).refused
    assert "1 round cannot" in estimate([0.7], [None], 2).refused
    wide = estimate([0.4, 0.7, 0.69, 1.2, 0.66], [0, 0, 0, 0, 0], cores=2)
    assert wide.refused.startswith("the rounds' ratios range too widely (x0.4 to x1.2)")
    # (an idle machine's rounds of a 5 ms step: uncertain, and the interval says by how much)
    noisy = estimate([0.795, 0.619, 0.59, 0.474, 0.532], [0.03, 0.05, 0, 0.01, 0], cores=2)
    assert noisy.refused is None and noisy.speedup == 0.59


def test_a_round_on_a_busy_machine_is_named_when_it_widens_the_interval():
    # (what a run beside another job gave: the CPU side's first round at 179 ms, then 5 ms)
    result = estimate([21.8, 0.649, 0.624, 0.467, 0.665], [0.99, 0.0, 0.01, 0.03, 0.01], cores=2)
    assert result.refused == (
        "the rounds' ratios range too widely (x0.467 to x21.8) for one figure to mean anything"
        " (other processes used 1.0 cores before round 1); run it again on an idle machine"
    )


def test_no_rounds_no_estimate():
    assert estimate([], [], 2) == speedup_estimate.Estimate(None, None, None)


def test_the_probe_reads_the_machine():
    share = speedup_estimate.others_share(0.2)
    assert share is None or 0 <= share <= speedup_estimate.cores() * 1.5
