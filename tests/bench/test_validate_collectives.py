"""`python -m bench.validate_collectives`: collectives against the measured tables (every figure is held by
tests/bench/test_report.py); here, the targets that are properties rather than figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import validate_collectives
from tests.bench.conftest import group

DATASETS = {
    "aiconfigurator-nccl", "aiconfigurator-custom", "llmcompass", "vidur-a100_pairwise_nvlink", "vidur-a100_dgx",
    "vidur-a100_dgx-2nodes", "tpu7x",
    # the newer generations' NCCL tables, each on its catalogue profile's fabric
    "aiconfigurator-nccl-b200", "aiconfigurator-nccl-gb200", "aiconfigurator-nccl-l40s",
    "aiconfigurator-nccl-rtx-pro-6000",
}  # fmt: skip
# Small-message floor (predicted / measured, 10th percentiles of messages ≤ 64 KiB): the target is within 2×.
FLOORS = sorted(DATASETS - {"tpu7x"})  # the TPU7x table has no message under 1 MiB


def test_every_dataset_is_reported(fresh: dict[str, Any]) -> None:
    rows = fresh["collectives"]
    assert {r["dataset"] for r in rows.values()} == DATASETS
    assert all(rows[f"{name}/all/all"]["count"] > 0 for name in DATASETS)


@pytest.mark.parametrize("dataset", FLOORS)
def test_small_message_floor_within_2x(fresh: dict[str, Any], dataset: str) -> None:
    ratio = fresh["collectives"][f"{dataset}/all/all"]["floor_ratio"]
    assert 0.5 <= ratio <= 2.0, f"{dataset}: predicted floor is {ratio:.2f}× the measured one"


def test_eight_gpu_nccl_rings_meet_the_target(fresh: dict[str, Any]) -> None:
    # Tensor parallelism over a whole NVSwitch node, the case inference cares most about: median ≤ 15 %.
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        row = fresh["collectives"][f"aiconfigurator-nccl/{op}/8 GPUs"]
        assert row["median_ape"] <= 0.15, (op, row["median_ape"])


def test_b200_rings_over_a_whole_node_meet_the_target(fresh: dict[str, Any]) -> None:
    # B200's 8-GPU rings, on the b200 profile's NVLink 5 figures alone (nothing chosen on its table).
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        row = fresh["collectives"][f"aiconfigurator-nccl-b200/{op}/8 GPUs"]
        assert row["median_ape"] <= 0.15, (op, row["median_ape"])


@pytest.mark.slow  # every collective table predicted
@group("ops")
def test_the_command_writes_the_report_as_json(tmp_path: Path) -> None:
    out = tmp_path / "collectives.json"
    assert validate_collectives.main(["--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {r["dataset"] for r in rows} == DATASETS


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate_collectives.main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "missing validation file" in capsys.readouterr().err
