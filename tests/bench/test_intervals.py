"""The prediction intervals' table (`bench.intervals`): coverage counted on a residual set worked by hand, and the
shipped table (adapters/intervals.json) being exactly what the command generates from the validation data now."""

from __future__ import annotations

import numpy as np

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


def test_the_shipped_table_is_what_the_command_generates() -> None:
    """As `python -m bench.intervals --check`: regenerate from validation/ and compare byte for byte, the table and
    the LOO figures bench.report renders."""
    doc, figures = intervals.generate()
    assert intervals.TABLE.read_text() == intervals._text(doc)
    assert intervals.FIGURES_PATH.read_text() == intervals._text(figures)
