"""The calibration math (roofline.calibration), against corrections planted by hand in synthetic data."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.calibration import MIN_POINTS, Correction, Method, apply, fit


def grid(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """n ops whose one size runs over 2^10 … 2^25 and whose modelled work is 1 ns per 1024 elements."""
    log2_size = np.linspace(10, 25, n)
    return log2_size[:, None], 2.0**log2_size * 1e-9 / 1024


def test_recovers_a_planted_launch_cost_and_utilisation() -> None:
    features, work = grid()
    measured = 4e-6 + 1.25 * work  # 4 µs per call, 1/1.25 of the modelled throughput
    c = fit(features, work, measured)
    assert c is not None
    assert c.launch_s == pytest.approx(4e-6, rel=1e-6)
    assert c.coef == pytest.approx((1.25, 0.0, 0.0), abs=1e-6)
    assert c.floor_s == pytest.approx(measured.min())
    assert np.max(np.abs(c.residuals)) < 1e-9
    # A new size inside the range: 4 µs + 1.25 · work, by neighbours (residual ≈ 0) on top of the fit.
    w = np.array([2.0**17.3 * 1e-9 / 1024])
    time_s, how = apply(c, np.array([[17.3]]), w, physical_s=w + 2.5e-6)
    assert time_s[0] == pytest.approx(4e-6 + 1.25 * w[0], rel=1e-9)
    assert how.tolist() == [Method.interpolated]


def test_no_ops_to_correct_is_no_answer_not_an_error() -> None:
    # Found by schemathesis: a held-out share of 5e-324 rounds to no results, and apply() was handed empty arrays.
    features, work = grid()
    c = fit(features, work, 4e-6 + 1.25 * work)
    assert c is not None
    time_s, how = apply(c, features[:0], work[:0], physical_s=work[:0])
    assert (time_s.shape, how.shape) == ((0,), (0,))


def test_size_dependent_utilisation() -> None:
    features, work = grid(100)
    z = np.log10(work) - np.mean(np.log10(work))
    measured = work * (1.5 - 0.2 * z + 0.05 * z * z)  # small ops reach less of peak; no fixed cost
    c = fit(features, work, measured)
    assert c is not None
    assert c.launch_s == pytest.approx(0.0, abs=1e-12)
    assert c.coef == pytest.approx((1.5, -0.2, 0.05), rel=1e-6)


def test_far_from_measurements_it_says_so() -> None:
    features, work = grid()
    features = np.c_[features, np.zeros(len(work))]  # a second size, always 2^0 in the measurements
    measured = 1.25 * work
    c = fit(features, work, measured)
    assert c is not None
    # A decade of work past the largest measured (more than the half decade the fit may extrapolate): physical.
    far = np.array([work.max() * 10.0])
    time_s, how = apply(c, np.array([[28.3, 0.0]]), far, physical_s=far + 2.5e-6)
    assert how.tolist() == [Method.physical] and time_s[0] == far[0] + 2.5e-6
    # Inside the range of work, but the second size is 2^3 where every measurement had 2^0: the fit alone.
    mid = np.array([work[32]])
    time_s, how = apply(c, np.array([[features[32, 0], 3.0]]), mid, physical_s=mid)
    assert how.tolist() == [Method.fitted] and time_s[0] == pytest.approx(1.25 * mid[0], rel=1e-9)


def test_interpolates_a_local_bump_between_neighbours() -> None:
    features, work = grid(64)
    bump = np.where((features[:, 0] > 15) & (features[:, 0] < 17), np.log(1.3), 0.0)  # 30 % slower near 2^16
    measured = 1.1 * work * np.exp(bump)
    c = fit(features, work, measured)
    assert c is not None
    inside = np.array([2.0**16 * 1e-9 / 1024])
    time_s, how = apply(c, np.array([[16.0]]), inside, physical_s=inside)
    parametric = c.launch_s + inside[0] * c.coef[0]  # the fit is near-constant: the bump is 7 of 64 points
    assert how.tolist() == [Method.interpolated]
    assert time_s[0] / inside[0] == pytest.approx(1.1 * 1.3, rel=0.03)
    assert time_s[0] > 1.2 * parametric


def test_variants_are_never_neighbours() -> None:
    features, work = grid(64)
    variants = np.arange(64) % 2
    measured = work * np.where(variants == 1, 2.0, 1.0)  # variant 1 runs at half the throughput
    c = fit(features, work, measured, variants)
    assert c is not None
    w = np.array([work[20], work[20]])
    f = np.array([features[20], features[20]])
    time_s, _ = apply(c, f, w, physical_s=w, variants=np.array([0, 1]))
    assert time_s[0] / w[0] == pytest.approx(1.0, rel=0.02)
    assert time_s[1] / w[1] == pytest.approx(2.0, rel=0.02)


def test_leave_one_out_ignores_the_point_itself() -> None:
    features, work = grid(64)
    measured = work.copy()
    measured[30] *= 2.0  # one outlier
    c = fit(features, work, measured)
    assert c is not None
    own, other = apply(c, features[30:31], work[30:31], work[30:31], own=np.array([30]))
    kept, _ = apply(c, features[30:31], work[30:31], work[30:31])
    assert kept[0] / work[30] > own[0] / work[30]  # with itself it leans to its own measurement
    assert own[0] / work[30] == pytest.approx(c.launch_s / work[30] + c.coef[0], rel=0.05)
    del other


def test_too_few_points_fit_nothing_and_json_round_trips() -> None:
    features, work = grid(MIN_POINTS - 1)
    assert fit(features, work, work) is None
    features, work = grid(20)
    c = fit(features, work, 1.2 * work + 1e-6)
    assert c is not None
    back = Correction.from_json(c.to_json())
    assert back.launch_s == c.launch_s and back.coef == c.coef and back.points.shape == c.points.shape
    a, _ = apply(c, features, work, work)
    b, _ = apply(back, features, work, work)
    np.testing.assert_allclose(a, b, rtol=1e-5)
