"""The benchmark's statistics: a speedup that survives a noisy machine.

The two sides run in alternating rounds (before, after, before, after...), so that each round's
ratio compares the sides under much the same load; the speedup is the median of the rounds'
ratios, with a distribution-free confidence interval for that median (order statistics: no
assumption about how step times are distributed). Before each round PyTPU runs nothing and
samples, for a moment, how much of the machine's CPU other processes use. A headline figure is
refused, with the reason, when the rounds are too few to bound it, when the interval is too wide to
mean anything, or when other work kept the machine busy.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

CONFIDENCE = 0.90  # the interval's target coverage of the true median ratio
LEAST_CONFIDENCE = 0.75  # fewer rounds than this needs (3) give no headline figure
WIDEST = 2.0  # an interval whose high end is more than twice its low end says too little
BUSY_SHARE = 0.25  # of the cores, the most other processes may use on average
PROBE_SECONDS = 1.0  # how long each probe of the machine lasts
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float  # the coverage the order statistics give for this many rounds


@dataclass(frozen=True)
class Estimate:
    """The speedup over the rounds: the median ratio, its interval, and whether it is a figure a
    reviewer can trust (`refused`: why not)."""

    speedup: float | None
    interval: Interval | None
    refused: str | None


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The narrowest order-statistic interval [x(k), x(n+1-k)] covering the median with at least
    `confidence`; with too few values for that, the whole range and the coverage it has."""
    n = len(values)
    if n < 2:
        return None
    ordered = sorted(values)
    best = 1
    for k in range(1, n // 2 + 1):
        if _coverage(n, k) >= confidence:
            best = k
    return Interval(ordered[best - 1], ordered[n - best], round(_coverage(n, best), 4))


def _coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n+1-k)) for n values: 1 - 2 P(Binomial(n, 1/2) < k)."""
    below = sum(math.comb(n, i) for i in range(k))
    return 1 - 2 * below / 2**n


def estimate(ratios: list[float], others: list[float | None], cores: int) -> Estimate:
    """The speedup of the rounds' `ratios` (baseline step over target step), given what other
    processes used of the machine's `cores` before each round (`others`, in cores; None: not
    known on this system)."""
    if not ratios:
        return Estimate(None, None, None)
    # Three significant digits: a slow target (x0.0042) must not round to zero.
    speedup = float(f"{statistics.median(ratios):.3g}")
    interval = median_interval(ratios)
    if interval is not None:
        interval = Interval(_figure(interval.low), _figure(interval.high), interval.confidence)
    known = [share for share in others if share is not None]
    busy = statistics.mean(known) if known else 0.0
    if busy > BUSY_SHARE * cores:
        refused = (
            f"other processes used {busy:.1f} of the machine's {cores} CPU cores on average while"
            " the benchmark ran, so the sides' times depend on what else ran; run it again on an"
            " idle machine"
        )
    elif interval is None or interval.confidence < LEAST_CONFIDENCE:
        refused = (
            f"{len(ratios)} round{'s' if len(ratios) != 1 else ''} cannot bound the speedup; the"
            " `benchmark_rounds` setting needs 3 or more"
        )
    elif interval.high > WIDEST * interval.low:
        busy_rounds = [
            f"{share:.1f} cores before round {number}"
            for number, share in enumerate(others, 1)
            if share is not None and share > BUSY_SHARE * cores
        ]
        seen = f" (other processes used {', '.join(busy_rounds)})" if busy_rounds else ""
        refused = (
            f"the rounds' ratios range too widely (x{interval.low:.3g} to x{interval.high:.3g}) for"
            f" one figure to mean anything{seen}; run it again on an idle machine"
        )
    else:
        refused = None
    return Estimate(speedup, interval, refused)


def _figure(value: float) -> float:
    return float(f"{value:.3g}")


# --- the machine ------------------------------------------------------------------------------


def cores() -> int:
    """The CPU cores this process (and the programs it starts) may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def others_share(seconds: float = PROBE_SECONDS) -> float | None:
    """The CPU cores other processes kept busy over `seconds` while PyTPU ran nothing (from the
    kernel's counters, less PyTPU's own use); None where the system does not count (not Linux)."""
    before, own_before = _busy_ticks(), _own_seconds()
    if before is None:
        return None
    started = time.perf_counter()
    time.sleep(seconds)
    after, own_after = _busy_ticks(), _own_seconds()
    elapsed = time.perf_counter() - started
    if after is None or elapsed <= 0:
        return None
    busy = (after - before) / os.sysconf("SC_CLK_TCK") - (own_after - own_before)
    return round(max(busy, 0.0) / elapsed, 2)


def _busy_ticks() -> int | None:
    """The machine's CPU time spent busy so far, in clock ticks (user, nice, system, irq,
    softirq, steal: all but idle and iowait)."""
    try:
        fields = PROC_STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return user + nice + system + irq + softirq + steal


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system
