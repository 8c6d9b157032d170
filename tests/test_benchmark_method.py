"""The benchmark-method check (benchmarks/benchmark_method.py): when it says the method held."""

from __future__ import annotations

from benchmarks.benchmark_method import held
from pytpu.engine.verify import benchmark
from pytpu.engine.verify.measured import Interval


def _section(speedup: float, low: float, high: float, refused: str | None = None):
    section = benchmark.compare("python train.py", [], [], warmup=3, steps=10)
    section.speedup, section.refused = speedup, refused
    section.interval = Interval(low=low, high=high, confidence=0.9375)
    return section


def test_a_busy_interval_that_holds_the_idle_figure_holds():
    ok, found = held(_section(0.58, 0.52, 0.58), _section(0.6, 0.5, 0.7))
    assert ok and found == "the busy run's interval x0.5-x0.7 contains the idle figure x0.58"


def test_a_busy_interval_that_misses_the_idle_figure_fails():
    ok, found = held(_section(0.58, 0.52, 0.58), _section(16.6, 16.6, 17.1))
    assert not ok and "does not contain the idle figure x0.58" in found


def test_a_refusal_on_the_busy_machine_holds_and_on_the_idle_one_fails():
    busy = _section(2.12, 0.7, 17.9, refused="other processes used 2.0 of the machine's 2 cores")
    assert held(_section(0.58, 0.52, 0.58), busy)[0]
    assert not held(_section(0.58, 0.3, 0.9, refused="too wide"), busy)[0]
