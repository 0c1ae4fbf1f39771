"""Timing done right: warm-up, synchronisation, many repeats, median and spread, inputs rotated past the caches.

`measure` is backend-neutral: it calls `run(i)` for input set `i`, waits with `sync`, and times the pair with the
host clock, so what it reports is host wall-clock time per call including dispatch (timing scope `wall_clock`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Stats", "TimingPolicy", "measure", "percentile", "rotation_sets", "summarize"]


@dataclass(frozen=True)
class Stats:
    """Summary of the repeats of one measurement, in seconds."""

    median_s: float
    p10_s: float
    p90_s: float
    repeats: int


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th quantile (0 ≤ q ≤ 1) of already sorted values, linear between closest ranks.

    This is Hyndman & Fan's type 7, numpy's default: position (n - 1)·q, interpolated between its neighbours.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def summarize(times_s: Sequence[float]) -> Stats:
    """Median, 10th and 90th percentile of per-call times (seconds)."""
    if not times_s:
        raise ValueError("no timings to summarize")
    if any(not math.isfinite(t) or t <= 0 for t in times_s):
        raise ValueError("timings must be positive and finite")
    ordered = sorted(times_s)
    return Stats(
        median_s=percentile(ordered, 0.5),
        p10_s=percentile(ordered, 0.1),
        p90_s=percentile(ordered, 0.9),
        repeats=len(ordered),
    )


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to time one op.

    Timed calls continue until both `min_repeats` calls and `min_time_s` seconds are reached, or `max_repeats`.
    Inputs are cycled through enough sets to move `rotate_bytes` (set to twice the last-level cache) between two
    uses of the same set, so a call never finds its inputs in the cache of the previous one.
    """

    warmup: int = 5
    min_repeats: int = 30
    max_repeats: int = 1000
    min_time_s: float = 0.5
    rotate_bytes: int = 256 << 20
    max_sets: int = 4096

    @classmethod
    def quick(cls, rotate_bytes: int) -> TimingPolicy:
        """Small counts for CI and CPU hosts: still a median of several calls past a warm-up."""
        return cls(warmup=2, min_repeats=7, max_repeats=100, min_time_s=0.03, rotate_bytes=rotate_bytes, max_sets=256)

    def for_ceilings(self) -> TimingPolicy:
        """At least 15 calls and a full second per ceiling, whatever the run's size: every later prediction on a
        host profile is read against these figures, and a second of calls rides out a short burst of load on a
        shared machine that a 30 ms window would report as the host's speed."""
        return replace(
            self,
            warmup=max(self.warmup, 5),
            min_repeats=max(self.min_repeats, 15),
            min_time_s=max(self.min_time_s, 1.0),
            max_repeats=max(self.max_repeats, 100_000),
        )


def rotation_sets(set_bytes: int, policy: TimingPolicy) -> int:
    """How many copies of an op's inputs to cycle through so that their total exceeds `policy.rotate_bytes`."""
    if set_bytes <= 0:
        raise ValueError("an input set has a positive size")
    return max(1, min(policy.max_sets, math.ceil(policy.rotate_bytes / set_bytes)))


def measure(
    run: Callable[[int], Any],
    sync: Callable[[Any], None],
    sets: int,
    policy: TimingPolicy,
    clock: Callable[[], float] = time.perf_counter,
) -> Stats:
    """Time `run(i % sets)` followed by `sync(result)`: warm-up first (compilation, a full pass over the input
    sets so the caches hold other data), then timed calls until the policy is satisfied."""
    if sets < 1:
        raise ValueError("at least one input set")
    warm = max(policy.warmup, sets)
    for i in range(warm):
        sync(run(i % sets))
    times: list[float] = []
    spent = 0.0
    i = warm
    while len(times) < policy.max_repeats and (len(times) < policy.min_repeats or spent < policy.min_time_s):
        start = clock()
        sync(run(i % sets))
        elapsed = clock() - start
        times.append(elapsed)
        spent += elapsed
        i += 1
    return summarize(times)
