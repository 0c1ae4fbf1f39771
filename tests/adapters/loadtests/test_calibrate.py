"""Serving calibrations: the named corrections recovered from load tests made with them, the held-out error, and
the corrections applied to an estimate, by hand."""

from __future__ import annotations

import numpy as np
import pytest

import adapters
from adapters import ServingCorrection

TRUE = ServingCorrection(first_token_s=0.015, iteration_host_s=0.001, prefill_factor=1.2, decode_factor=1.1)
TTFT_P = np.array([0.02, 0.04, 0.08, 0.16])
TPOT_P = np.array([0.005, 0.006, 0.008, 0.010])


def test_load_tests_made_with_known_corrections_give_them_back() -> None:
    # Measured = the corrections applied to the predictions: TTFT 0.015 + 1.2·x + 0.001, TPOT 1.1·x + 0.001.
    ttft_m, tpot_m = TRUE.ttft(TTFT_P), TRUE.tpot(TPOT_P)
    fit = adapters.fit_serving(TTFT_P, np.asarray(ttft_m), TPOT_P, np.asarray(tpot_m))
    assert fit.first_token_s == pytest.approx(0.015, abs=1e-12)
    assert fit.iteration_host_s == pytest.approx(0.001, abs=1e-12)
    assert fit.prefill_factor == pytest.approx(1.2)
    assert fit.decode_factor == pytest.approx(1.1)
    errors = adapters.held_out(TTFT_P, np.asarray(ttft_m), TPOT_P, np.asarray(tpot_m))
    # Before: TPOT 0.005 predicted, 1.1 × 0.005 + 0.001 = 0.0065 measured: 0.005 / 0.0065 − 1 = −23.08 %; 0.006 /
    # 0.0076 − 1 = −21.05 %, 0.008 / 0.0098 − 1 = −18.37 %, 0.010 / 0.012 − 1 = −16.67 %: the median is 19.71 %.
    assert errors["before"]["tpot"]["median_ape"] == pytest.approx((0.21053 + 0.18367) / 2, abs=1e-5)
    assert errors["after"]["tpot"]["median_ape"] == pytest.approx(0.0, abs=1e-9)  # each point held out, still exact
    assert errors["after"]["ttft"]["median_ape"] == pytest.approx(0.0, abs=1e-9)


def test_one_predicted_ttft_is_read_as_a_fixed_cost() -> None:
    # Every load test predicted at TTFT 0.02 s, measured 0.05 s and TPOT exact: no host cost, and the 0.03 s between
    # them is the first token's fixed cost (a factor of 2.5 would say the same at this one point).
    fit = adapters.fit_serving(np.full(3, 0.02), np.full(3, 0.05), TPOT_P[:3], TPOT_P[:3])
    assert fit.iteration_host_s == pytest.approx(0.0, abs=1e-12)
    assert (fit.decode_factor, fit.prefill_factor) == (pytest.approx(1.0), 1.0)
    assert fit.first_token_s == pytest.approx(0.03)


def test_a_negative_fixed_cost_is_never_fitted() -> None:
    # Measured TPOT 0.9·x − 0.0002 would need a negative host cost: the fit holds it at 0 and takes the factor
    # through the origin, Σxy / Σx².
    tpot_m = 0.9 * TPOT_P - 0.0002
    fit = adapters.fit_serving(TTFT_P, TTFT_P, TPOT_P, tpot_m)
    assert fit.iteration_host_s == 0.0
    assert fit.decode_factor == pytest.approx(float(np.dot(TPOT_P, tpot_m) / np.dot(TPOT_P, TPOT_P)))


def test_corrections_applied_to_an_estimate_by_hand() -> None:
    # TTFT 0.02 s, TPOT 0.005 s, E2E 0.02 + 99 × 0.005 = 0.515 s, a closed loop at 100 tokens/s. With 10 ms on the
    # first token, 1 ms per iteration and decode 1.2×: TTFT 0.01 + 0.02 + 0.001 = 0.031 s, TPOT 1.2 × 0.005 + 0.001
    # = 0.007 s, E2E 0.031 + 0.495 × 0.007 / 0.005 = 0.724 s, throughput 100 × 0.515 / 0.724 = 71.13 tokens/s.
    stats = {"p50": None, "p90": None, "p99": None, "mean_p10": None, "mean_p90": None}
    doc = {"ttft_s": stats | {"mean": 0.02}, "tpot_s": stats | {"mean": 0.005}, "e2e_s": stats | {"mean": 0.515},
           "output_tokens_per_s": 100.0, "requests_per_s": 1.0, "duration_s": 10.0,
           "output_tokens_per_s_per_user": 200.0}  # fmt: skip
    fix = ServingCorrection(first_token_s=0.01, iteration_host_s=0.001, prefill_factor=1.0, decode_factor=1.2)
    out = adapters.calibrate_serving(doc, fix, closed_loop=True)
    assert out["ttft_s"]["mean"] == pytest.approx(0.031)
    assert out["tpot_s"]["mean"] == pytest.approx(0.007)
    assert out["e2e_s"]["mean"] == pytest.approx(0.724)
    assert out["output_tokens_per_s"] == pytest.approx(71.13, abs=0.01)
    assert out["output_tokens_per_s_per_user"] == pytest.approx(200.0 * 0.005 / 0.007)
    open_loop = adapters.calibrate_serving(doc, fix, closed_loop=False)
    assert open_loop["output_tokens_per_s"] == 100.0  # an open loop's arrivals do not change
