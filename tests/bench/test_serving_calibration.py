"""bench.serving_calibration on rows made by hand: groups of at least 5 rows only, 3 uploaded, the rest predicted."""

from __future__ import annotations

import pytest

from bench.serving_calibration import evaluate


def _rows(layout: str, n: int) -> list[dict[str, object]]:
    # Measured = 20 ms + TTFT predicted, and 1.25 × TPOT predicted (so before: TTFT at 0.1 s is 0.1 / 0.12 − 1).
    out = []
    for i in range(n):
        ttft, tpot = 0.1 * (i + 1), 0.004 + 0.001 * i
        out.append({"model": "m", "system": "b200", "backend": "vllm", "mode": "agg", "precision": "fp8",
                    "layout": layout, "pred_ttft_s": ttft, "ttft_s": ttft + 0.02, "pred_tpot_s": tpot,
                    "tpot_s": 1.25 * tpot})  # fmt: skip
    return out


def test_a_group_of_five_is_fitted_on_three_and_predicts_the_other_two() -> None:
    result = evaluate(_rows("tp4", 5) + _rows("tp8", 4))  # the tp8 group has too few rows
    assert result["groups"] == 1
    e = result["errors"]["all"]
    assert e["rows"] == 2
    # TPOT before: 1 / 1.25 − 1 = −20 % on every row; after, the fit on 3 exact rows is exact: 0.
    assert e["tpot_before"] == pytest.approx(0.2)
    assert e["tpot_after"] == pytest.approx(0.0, abs=1e-9)
    assert e["ttft_after"] == pytest.approx(0.0, abs=1e-9)
