"""Timing statistics and the measuring loop, against values worked out by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from worker.timing import Stats, TimingPolicy, measure, percentile, rotation_sets, summarize


def test_percentiles_of_one_to_ten_by_hand() -> None:
    values = [float(v) for v in range(1, 11)]
    # Position (n - 1)·q = 9q: the median sits halfway between 5 and 6; p10 at 0.9 (between 1 and 2), p90 at 8.1.
    assert percentile(values, 0.5) == 5.5
    assert percentile(values, 0.1) == pytest.approx(1.9)
    assert percentile(values, 0.9) == pytest.approx(9.1)
    assert percentile(values, 0.0) == 1.0 and percentile(values, 1.0) == 10.0


def test_summary_of_an_unsorted_odd_sample_by_hand() -> None:
    # Sorted: 1, 2, 3, 4, 10 ms. Median 3; p10 at position 0.4 → 1 + 0.4·(2 - 1) = 1.4; p90 at 3.6 → 4 + 0.6·6 = 7.6.
    stats = summarize([0.004, 0.001, 0.010, 0.003, 0.002])
    assert stats.median_s == pytest.approx(0.003)
    assert stats.p10_s == pytest.approx(0.0014)
    assert stats.p90_s == pytest.approx(0.0076)
    assert stats.repeats == 5


def test_percentile_agrees_with_numpy_default() -> None:
    rng = np.random.default_rng(7)
    sample = sorted(rng.lognormal(size=37).tolist())
    for q in (0.1, 0.25, 0.5, 0.9):
        assert percentile(sample, q) == pytest.approx(float(np.percentile(sample, 100 * q)))


def test_one_timing_is_its_own_median_and_spread() -> None:
    assert summarize([2e-6]) == Stats(2e-6, 2e-6, 2e-6, 1)


@pytest.mark.parametrize("bad", [[], [0.0], [-1e-6], [float("nan")], [float("inf")]])
def test_summary_refuses_what_is_not_a_timing(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)


def test_rotation_covers_twice_the_cache_and_is_capped() -> None:
    policy = TimingPolicy(rotate_bytes=64 << 20, max_sets=100)
    assert rotation_sets(1 << 20, policy) == 64  # 64 MiB / 1 MiB
    assert rotation_sets(3 << 20, policy) == 22  # ⌈64 / 3⌉
    assert rotation_sets(1 << 30, policy) == 1  # one set already larger than the cache
    assert rotation_sets(1024, policy) == 100  # capped


class FakeClock:
    """Each call to the timed function advances time by the next duration."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = itertools.cycle(durations)

    def __call__(self) -> float:
        return self.now

    def run(self, i: int) -> int:
        self.now += next(self.durations)
        return i


def test_measure_warms_up_over_every_set_then_rotates() -> None:
    clock = FakeClock([0.001])
    seen: list[int] = []
    policy = TimingPolicy(warmup=2, min_repeats=5, max_repeats=100, min_time_s=0.0)
    stats = measure(clock.run, seen.append, sets=3, policy=policy, clock=clock)
    # Warm-up: max(2, 3 sets) = 3 calls over sets 0, 1, 2; then 5 timed calls continuing the rotation.
    assert seen == [0, 1, 2, 0, 1, 2, 0, 1]
    assert stats == Stats(0.001, 0.001, 0.001, 5)


def test_measure_runs_until_both_count_and_time_are_reached() -> None:
    clock = FakeClock([0.01, 0.03])
    policy = TimingPolicy(warmup=1, min_repeats=3, max_repeats=1000, min_time_s=0.1)
    stats = measure(clock.run, lambda _: None, sets=1, policy=policy, clock=clock)
    # Warm-up takes the first 0.01; timed: 0.03, 0.01, 0.03, 0.01, 0.03 = 0.11 s ≥ 0.1 after five calls.
    assert stats.repeats == 5
    assert stats.median_s == pytest.approx(0.03)
    assert stats.p10_s == pytest.approx(0.01)


def test_measure_stops_at_max_repeats() -> None:
    clock = FakeClock([1.0])
    policy = TimingPolicy(warmup=0, min_repeats=1, max_repeats=4, min_time_s=1e9)
    assert measure(clock.run, lambda _: None, sets=1, policy=policy, clock=clock).repeats == 4


def test_ceilings_are_timed_for_at_least_a_second_and_15_calls() -> None:
    quick = TimingPolicy.quick(rotate_bytes=1 << 20).for_ceilings()
    assert (quick.warmup, quick.min_repeats, quick.min_time_s, quick.rotate_bytes) == (5, 15, 1.0, 1 << 20)
    assert quick.max_repeats >= 1.0 / 1e-6 / 10  # a 10 µs call can fill its second
    full = TimingPolicy(min_repeats=30, min_time_s=2.0).for_ceilings()
    assert (full.min_repeats, full.min_time_s) == (30, 2.0)  # never less than the run's own policy
