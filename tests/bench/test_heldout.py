"""The held-out generation's tables (bench/heldout/h100, h200): only `bench.heldout` reads them, they parse as
measured, and the figures `python -m bench.heldout` wrote hold (decision 0037)."""

from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np
import pytest

from bench import heldout, intervals, loo, report, validate
from tests.bench.conftest import group

COMMITTED: dict[str, Any] = json.loads(heldout.FIGURES_PATH.read_text())
TOLERANCE = report.TOLERANCE  # the accuracy baseline's half a percentage point


@pytest.fixture(scope="module")
def fresh() -> dict[str, Any]:
    return heldout.figures()


@pytest.mark.slow  # every measured table parsed
@group("ops")
def test_nothing_that_fits_or_chooses_reads_the_held_out_tables() -> None:
    """The validation set has no Hopper rows, and the modules that derive constants and bands never name the folder."""
    assert not {"h100-sxm", "h200-sxm"} & {g.device for g in validate.load()}
    assert not heldout.DATA.is_relative_to(validate.data_dir())
    for module in (validate, loo, intervals, report):
        assert "heldout" not in inspect.getsource(module), module.__name__


@pytest.mark.parametrize(("folder", "first_ms"), [("h100", 0.003702000016346574), ("h200", 0.0038040000945329666)])
def test_the_tables_parse_as_measured(folder: str, first_ms: float) -> None:
    """Row counts of the files (1 500 bf16 and 400 fp8 shapes; 300 prefill shapes, 19 of them single-token, which
    cuDNN refused and the loader leaves out; 300 decode shapes), and the first bf16 row, m=1 n=32 k=1024, as its file
    gives it in ms."""
    groups = heldout.load(heldout.DATA / folder, heldout.DEVICES[folder])
    rows: dict[str, int] = {}
    for g in groups:
        rows[g.family] = rows.get(g.family, 0) + g.measured_s.size
        assert g.device == heldout.DEVICES[folder]
    assert rows == {"gemm-bf16": 1500, "gemm-fp8": 400, "attention-prefill-cudnn": 281, "attention-prefill-fa2": 281,
                    "attention-decode-fa2": 300}  # fmt: skip
    bf16 = next(g for g in groups if g.family == "gemm-bf16")
    assert bf16.labels[0] == "m=1 n=32 k=1024"
    assert bf16.measured_s[0] == pytest.approx(first_ms * 1e-3, rel=1e-12)
    assert bf16.scope == "torch-graph" and heldout.SCOPES["torch-graph"].launch_s == validate.KERNEL_FLOOR_S


def test_the_worker_run_is_predicted_with_its_own_host_cost() -> None:
    """The H200 worker run (bench/heldout/h200/worker_e2e.jsonl.gz): 131 results, of which the dispatch probe
    (77.68 µs, a host cost of 77.68 − 2.5 = 75.18 µs) was not sent; the 130 sent split 53 products, 47 attention
    calls, 29 memory-bound ops and one training step. Each is predicted as the service held it: the op's kernel time
    plus 75.18 µs (so never under it)."""
    results = heldout.worker_results(heldout.DATA / "h200" / heldout.WORKER_RUNS["h200"], "h200-sxm")
    assert {r.family: r.measured_s.size for r in results} == {
        "worker-matmul": 53, "worker-memory-bound": 29, "worker-attention": 47, "worker-train-step": 1,
    }  # fmt: skip
    for r in results:
        assert np.all(r.predicted_s > 75.18e-6 + validate.KERNEL_FLOOR_S * (1 - 1e-9)), r.family


@pytest.mark.xdist_group("heldout")  # its own figures, computed once, beside the baseline's groups
def test_every_figure_holds_its_baseline(fresh: dict[str, Any]) -> None:
    """Each family's error and coverage within half a percentage point of bench/heldout.json, either way."""
    assert [(f["family"], f["device"]) for f in fresh["families"]] == [
        (f["family"], f["device"]) for f in COMMITTED["families"]
    ]
    for now, then in zip(fresh["families"], COMMITTED["families"], strict=True):
        assert now["count"] == then["count"]
        for key in ("median_ape", "p90_ape", "bias", "coverage"):
            if then[key] is None:  # the worker's wall-clock rows: no kernel-time band covers their host cost
                assert now[key] is None, f"{now['family']} {now['device']} {key}"
                continue
            assert now[key] == pytest.approx(then[key], abs=TOLERANCE), f"{now['family']} {now['device']} {key}"


def test_the_page_is_rendered_from_the_committed_figures() -> None:
    assert heldout.DOC.read_text() == heldout.markdown(COMMITTED)
