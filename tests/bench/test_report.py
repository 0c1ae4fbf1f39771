"""The accuracy baseline holds: every figure `python -m bench.report` wrote to bench/baseline.json, recomputed now,
is within its tolerance either way. Worse fails (a regression); better fails too, until the baseline and
docs/validation.md are regenerated in the same commit, so that neither goes stale. docs/validation.md is rendered
from the baseline alone, and must be exactly what the committed baseline renders to."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bench import report
from tests.bench.conftest import committed, group

BASELINE = committed()
SERVING_ERRORS = ("count", "tpot", "ttft", "static_tpot", "static_ttft", "throughput", "static_throughput")
SERVING_COVERAGE = ("tpot_coverage", "ttft_coverage", "static_tpot_coverage", "throughput_coverage")
TOLERANCE = BASELINE["tolerance"]
FIGURES = {
    "ops": ("count", "median_ape", "p90_ape", "bias"),
    "collectives": ("count", "median_ape", "p90_ape", "bias", "floor_ratio"),
    "inference": ("measured_us", "error"),
    "training": ("measured_s", "error"),
    "serving": (*SERVING_ERRORS, *SERVING_COVERAGE),
}
CASES = [pytest.param(s, k, marks=group(s), id=f"{s}:{k}") for s in FIGURES for k in BASELINE[s]]


def test_the_tolerance_is_half_a_percentage_point() -> None:
    assert TOLERANCE == report.TOLERANCE == 0.005


@pytest.mark.slow
@pytest.mark.parametrize("section", [pytest.param(s, marks=group(s)) for s in FIGURES])
def test_the_baseline_names_every_row_the_report_computes(fresh: Mapping[str, Any], section: str) -> None:
    assert set(fresh[section]) == set(BASELINE[section])


@pytest.mark.slow
@pytest.mark.parametrize(("section", "key"), CASES)
def test_every_figure_holds_its_baseline(fresh: Mapping[str, Any], section: str, key: str) -> None:
    now, then = fresh[section][key], BASELINE[section][key]
    for name in FIGURES[section]:
        if name in ("count", "measured_us", "measured_s"):  # the data, not the model: exactly as recorded
            assert now[name] == then[name], f"{key}: {name} {now[name]} != {then[name]}"
            continue
        if then[name] is None:
            assert now[name] is None, f"{key}: {name} is now {now[name]}"
            continue
        moved = now[name] - then[name]
        assert abs(moved) <= TOLERANCE, (
            f"{key}: {name} {now[name]:.2%} against the baseline's {then[name]:.2%} ({moved:+.2%}); "
            + ("worse: a regression" if abs(now[name]) > abs(then[name]) else "better: run python -m bench.report")
        )


def test_the_document_is_rendered_from_the_committed_baseline() -> None:
    text, doc = report._write(BASELINE)
    assert report.BASELINE.read_text() == text, "bench/baseline.json is not in the form bench.report writes"
    assert report.DOC.read_text() == doc, "docs/validation.md is not what bench/baseline.json renders to"


def test_check_mode_finds_a_stale_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The committed figures stand in for a fresh computation: this is about what --check compares, not the figures.
    monkeypatch.setattr(report, "baseline", lambda data=None: BASELINE)
    doc, base = tmp_path / "validation.md", tmp_path / "baseline.json"
    assert report.main(["--doc", str(doc), "--baseline", str(base)]) == 0
    assert json.loads(base.read_text()) == BASELINE and doc.read_text().startswith("# Validation")
    assert report.main(["--check", "--doc", str(doc), "--baseline", str(base)]) == 0
    doc.write_text(doc.read_text().replace("| met |", "| **missed** |", 1))
    assert report.main(["--check", "--doc", str(doc), "--baseline", str(base)]) == 1
    assert f"out of date: {doc}" in capsys.readouterr().err


def test_a_rendered_row_carries_the_figures_of_its_baseline_row() -> None:
    row = BASELINE["ops"]["aiconfigurator/gemm/a100-sxm-80gb"]
    line = next(x for x in report.render(BASELINE) if x.startswith("| aiconfigurator | gemm | a100-sxm-80gb |"))
    assert f"| {row['median_ape']:.1%} | {row['p90_ape']:.1%} | {row['bias']:+.1%} |" in line
    assert f"| {row['count']:,} |" in line


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--data", str(tmp_path / "nowhere"), "--check"]) == 2
    assert "validation data not found" in capsys.readouterr().err


def test_the_baseline_assembles_its_sections_as_committed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`baseline()` around the sections (targets, sources, the LOO figures and the intervals' coverage read from
    bench/loo.json): with the committed sections standing in for fresh ones, it is the committed file exactly."""
    for name in ("ops", "collectives", "inference", "training"):
        monkeypatch.setattr(report, f"{name}_section", lambda root, name=name: BASELINE[name])
    monkeypatch.setattr(
        report, "serving_section", lambda root: (BASELINE["serving"], BASELINE["serving_not_expressible"])
    )
    assert report.baseline() == BASELINE
