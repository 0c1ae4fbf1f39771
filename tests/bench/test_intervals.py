"""The prediction intervals' table (`bench.intervals`): coverage counted on a residual set worked by hand, and the
shipped table (adapters/intervals.json) being exactly what the command generates from the validation data now."""

from __future__ import annotations

import numpy as np
import pytest

from bench import intervals


def _residuals(ratios: dict[str, float], rows: int = 60) -> intervals.Residuals:
    devices = [d for d in ratios for _ in range(rows)]
    return intervals.Residuals(
        family=np.full(len(devices), "matmul"),
        regime=np.full(len(devices), "compute"),
        device=np.array(devices),
        ratio=np.array([ratios[d] for d in devices]),
    )


def test_coverage_holds_each_device_out_of_the_table_too() -> None:
    """Devices a and c measure exactly the prediction (ratio 1), b twice it. Without a: b and c weigh half each,
    so p10 = 1 and p90 = 2, and a's rows are inside; likewise c. Without b: a and c give [1, 1], and b's rows (2) are
    all outside."""
    got = {c["device"]: c["coverage"] for c in intervals.coverage(_residuals({"a": 1.0, "b": 2.0, "c": 1.0}))}
    assert got == {"a": 1.0, "b": 0.0, "c": 1.0}
    assert intervals.summary(intervals.coverage(_residuals({"a": 1.0, "b": 2.0, "c": 1.0}))) == {"matmul": 0.6667}


@pytest.mark.slow  # every leave-one-device-out fold, recomputed
@pytest.mark.longest
def test_the_shipped_table_is_what_the_command_generates() -> None:
    """As `python -m bench.intervals --check`: regenerate from validation/ and compare byte for byte, the table and
    the LOO figures bench.report renders."""
    doc, figures = intervals.generate()
    assert intervals.TABLE.read_text() == intervals._text(doc)
    assert intervals.FIGURES_PATH.read_text() == intervals._text(figures)


def _family(ratios: dict[str, float], family: str, rows: int = 60) -> intervals.Residuals:
    res = _residuals(ratios, rows)
    return intervals.Residuals(np.full(res.ratio.size, family), res.regime, res.device, res.ratio)


def _joined(*parts: intervals.Residuals) -> intervals.Residuals:
    fields = ("family", "regime", "device", "ratio")
    return intervals.Residuals(*(np.concatenate([getattr(p, k) for p in parts]) for k in fields))


def test_a_family_widens_until_a_new_device_falls_inside_eighty_percent_of_the_time() -> None:
    """matmul: a, b, c measure 1.5, 2.0, 2.5 × the prediction. Held out in turn against the other two: a inside
    [1, 2.5] (the interval holds the estimate, 1), b inside [1.5, 2.5], c outside [1.5, 2.0], at every level (each
    device's rows are one value): 2/3 < 80 %, so the widest level, 0.02. softmax: a, b, c all at 1.5, always inside:
    the narrowest, 0.10. rotary, measured on a alone, cannot be held out against anything: no level of its own."""
    res = _joined(
        _family({"a": 1.5, "b": 2.0, "c": 2.5}, "matmul"),
        _family({"a": 1.5, "b": 1.5, "c": 1.5}, "softmax"),
        _family({"a": 1.2}, "rotary"),
    )
    assert intervals.choose_levels(res) == {"matmul": 0.02, "softmax": 0.1}
    shipped = intervals.table(res, levels={"matmul": 0.02, "softmax": 0.1})
    assert dict(shipped.levels) == {"matmul": 0.02}  # the nominal 0.10 is not listed
