"""Fitting a calibration on measured results (`adapters.fit_calibration`): the groups it learns from, the seeded
held-out split, the fit and the held-out errors before and after, on cases whose answers are worked out by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

import adapters
from schemas.benchmarks import ResultOp

_OP: TypeAdapter[ResultOp] = TypeAdapter(ResultOp)


def _matmul(m: int, dtype: str = "bf16") -> dict[str, Any]:
    """A stored result's op document, as the repository hands it back."""
    return _OP.dump_python(
        _OP.validate_python({"kind": "matmul", "m": m, "n": 1024, "k": 1024, "dtype": dtype}), mode="json"
    )


def test_error_stats_are_the_median_and_p90_of_the_relative_error_over_the_finite_pairs() -> None:
    predicted = np.array([1.1, 0.8, 2.0, np.nan, 5.0])
    measured = np.array([1.0, 1.0, 1.0, 1.0, 0.0])  # a NaN prediction and a zero measurement are left out
    stats = adapters.error_stats(predicted, measured)
    # By hand: signed errors 0.1, -0.2, 1.0; |·| sorted 0.1, 0.2, 1.0. p90 by linear interpolation between order
    # statistics (numpy's default): rank 0.9 × (3 − 1) = 1.8, so 0.2 + 0.8 × (1.0 − 0.2) = 0.84.
    assert stats.count == 3
    assert stats.median_ape == pytest.approx(0.2)
    assert stats.p90_ape == pytest.approx(0.84)
    assert stats.bias == pytest.approx(0.1)
    empty = adapters.error_stats(np.array([np.nan]), np.array([1.0]))
    assert (empty.count, empty.median_ape, empty.p90_ape, empty.bias) == (0, None, None, None)


def test_a_calibration_learns_from_results_with_positive_times_of_kinds_that_have_sizes() -> None:
    docs = [_matmul(64), _matmul(128), _matmul(256, "fp16"), {"kind": "chain"}, _matmul(512)]
    measured = np.array([1e-5, 0.0, 1e-5, 1e-5, 1e-5])  # position 1: no measurement
    work = np.array([1e-5, 1e-5, 1e-5, 1e-5, -1.0])  # position 4: all of its prediction is overhead
    # Position 3: a chain has no sizes of its own (adapters.UNCALIBRATED).
    assert adapters.calibration_groups(docs, measured, work) == {"matmul/bf16": [0], "matmul/fp16": [2]}


def _case(n: int) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray, np.ndarray]:
    """`n` matmuls whose measured time is twice the predicted one: predicted work w plus 2 µs of overhead, measured
    2·w + 4 µs."""
    docs = [_matmul(16 * 2**i) for i in range(n)]
    work = 1e-6 * 2.0 ** (np.arange(n) / 2)
    physical = work + 2e-6
    return docs, 2.0 * physical, physical, work


def test_a_constant_factor_is_learnt_and_measured_on_the_held_out_part() -> None:
    docs, measured, physical, work = _case(20)
    by_group = adapters.calibration_groups(docs, measured, work)
    fitted = adapters.fit_calibration(by_group, docs, measured, physical, work, seed=7, holdout_fraction=0.25)
    assert fitted is not None
    [group] = fitted.groups
    # 20 × 0.25 = 5 held out, 15 trained on.
    assert (group.family, group.dtype, group.train, group.holdout) == ("matmul", "bf16", 15, 5)
    # Before: predicted / measured − 1 = 1/2 − 1 on every point.
    for before in (group.before, fitted.before):
        assert (before.count, before.median_ape, before.p90_ape, before.bias) == (5, 0.5, 0.5, -0.5)
    # measured = 4 µs + 2 × work exactly: the parametric layer's launch time and utilisation factor, and no error left.
    assert group.launch_s == pytest.approx(4e-6, rel=1e-6)
    assert group.utilisation[0] == pytest.approx(2.0, rel=1e-6)
    assert fitted.after.median_ape is not None and fitted.after.median_ape < 1e-9
    assert fitted.after.p90_ape is not None and fitted.after.p90_ape < 1e-9
    assert set(fitted.model["groups"]) == {"matmul/bf16"}
    # The training points: 15 positions, numbered in order, none of them held out.
    assert len(fitted.trained) == 15
    assert sorted(fitted.trained) == list(fitted.trained)
    assert list(fitted.trained.values()) == list(range(15))


def test_the_split_is_the_seeds_and_too_few_training_points_fit_nothing() -> None:
    docs, measured, physical, work = _case(20)
    by_group = adapters.calibration_groups(docs, measured, work)

    def split(seed: int) -> dict[int, int]:
        fitted = adapters.fit_calibration(by_group, docs, measured, physical, work, seed=seed, holdout_fraction=0.25)
        assert fitted is not None
        return fitted.trained

    assert split(7) == split(7)
    assert split(7) != split(8)
    # 9 results, round(9 × 0.25) = 2 held out: 7 trained on, fewer than roofline.calibration.MIN_POINTS = 8.
    docs, measured, physical, work = _case(9)
    by_group = adapters.calibration_groups(docs, measured, work)
    assert adapters.fit_calibration(by_group, docs, measured, physical, work, seed=0, holdout_fraction=0.25) is None
