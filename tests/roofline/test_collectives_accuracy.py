"""Ridgeline's collective predictions against measured collectives stay as accurate as issue 5 left them.

Runs the comparison of `bench/validate_collectives.py` (the measured tables in ../shared/validation: aiconfigurator's
NCCL and TensorRT-LLM all-reduce tables, vidur's network tables, LLMCompass's 4×A100 all-reduce, TPU7x all-gathers;
see that module for sources, licences and what each measurement ran) and holds, per dataset, the median and p90
absolute error of messages of at least 1 MiB and the small-message floor to bounds just above the figures reached:
a change to the model that makes them worse fails here. Where the issue's target (median ≤ 15 %, floor within 2×)
is missed, the bound is the reached figure, not the target, and the reason is in the comment.

Without the data the test skips, except under CI (CI=true), where missing data is a failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import validate_collectives as validate
from tests.roofline.validation_data import require

# dataset: (median, p90) of |predicted / measured − 1| over messages ≥ 1 MiB, reached with the shipped defaults.
BOUNDS: dict[str, tuple[float, float]] = {
    "llmcompass": (0.05, 0.33),  # 4.1 %, 32.6 %: met (was 7.3 %, 38.4 % before the buffer copy and NCCL's LL)
    "aiconfigurator-custom": (0.13, 0.35),  # 12.5 %, 34.1 %: met; its rows from 2 MiB are NCCL's rings (below)
    # 19.3 %, 43.7 %: missed (was 23.7 %, then 20.8 %). The buffered Simple ring's copy through HBM (roofline.Link.
    # memory_bytes_per_s: s·(V/n)/M per rank, s = 2, 3 for all-gather, f = s·234/1835 = 0.26, 0.38 of a ring step)
    # explains part of the 2-GPU shortfall (the 512 MiB times follow V/B·(k(n−1) + f)/n with f 0.40-0.57 for
    # reduce-scatter and all-reduce, 0.55-0.86 for all-gather: 1.4-1.5 times, as 3 : 2); the rest is where NCCL
    # switches to Simple (1-2 MiB on 2-4 GPUs): measured 2-GPU all-gathers cost ~31 µs more than launch + one step
    # from 2 MiB on (19.9 µs at 1 MiB, 38.1 µs at 2 MiB), a fixed cost no cited source names. 8 GPUs alone: 12-16 %.
    "aiconfigurator-nccl": (0.20, 0.44),
    # 8.4 %, 54.0 %: met. The 4-GPU ring over PCIe is within 4 %; vidur's send_recv runs faster than the NVLink
    # bridge can carry (334 GB/s one way), so its timing cannot cover the whole transfer (p90).
    "vidur-a100_pairwise_nvlink": (0.09, 0.55),
    # 24.0 %, 38.0 %: missed, one node (2, 4, 8 GPUs): torch.distributed's NCCL in vidur runs the rings 8-21 %
    # slower than aiconfigurator's NCCL 2.27.3 at the same sizes (2-GPU all-reduce 64 MiB: 156 against 171 GB/s).
    "vidur-a100_dgx": (0.25, 0.39),
    # 67.4 %, 81.6 %: missed, and not a model error that a cited figure could fix. Across 2 nodes vidur's cluster
    # moves 5.9-7.8 GB/s per GPU (its own send_recv and 2 × 1 GPU all-reduce tables), a third of the DGX A100's
    # 25 GB/s HDR InfiniBand per GPU the validation assumes; no source on file names the network it had.
    "vidur-a100_dgx-2nodes": (0.68, 0.82),
    # 9.0 %, 53.3 %: met (was 16.7 %). One unidirectional ring over the 4 chips (bench.validate_collectives.
    # tpu7x_slice) at 90 % of Google's 100 GB/s per link, scaling-book's per-link figure for v5p/v6e. The 1 MiB rows
    # (-53 %) carry a ~13 µs fixed cost of the timed JAX program (the intercept from 4 to 16 MiB) against the
    # 1.5 µs assumed: not read off this table.
    "tpu7x": (0.10, 0.54),
}
# Small-message floor (predicted / measured, 10th percentiles of messages ≤ 64 KiB): within 2× where it is met.
FLOORS = (
    "aiconfigurator-nccl", "aiconfigurator-custom", "llmcompass", "vidur-a100_pairwise_nvlink", "vidur-a100_dgx",
    "vidur-a100_dgx-2nodes",
)  # fmt: skip


@pytest.fixture(scope="module")
def data() -> Path:
    return require(validate.data_dir, "collective accuracy check")


@pytest.fixture(scope="module")
def report(data: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(row["dataset"], row["op"], row["group"]): row for row in validate.report(data)}


def test_every_dataset_is_reported(report: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    datasets = {key[0] for key in report}
    assert datasets == set(BOUNDS)
    for name in datasets:
        assert report[(name, "all", "all")]["count"] > 0


@pytest.mark.parametrize(("dataset", "bound"), list(BOUNDS.items()), ids=list(BOUNDS))
def test_accuracy_holds(
    report: dict[tuple[str, str, str], dict[str, Any]], dataset: str, bound: tuple[float, float]
) -> None:
    row = report[(dataset, "all", "all")]
    median, p90 = bound
    assert row["median_ape"] <= median, f"{dataset}: median error {row['median_ape']:.1%} > {median:.1%}"
    assert row["p90_ape"] <= p90, f"{dataset}: p90 error {row['p90_ape']:.1%} > {p90:.1%}"


@pytest.mark.parametrize("dataset", FLOORS)
def test_small_message_floor_within_2x(report: dict[tuple[str, str, str], dict[str, Any]], dataset: str) -> None:
    ratio = report[(dataset, "all", "all")]["floor_ratio"]
    assert 0.5 <= ratio <= 2.0, f"{dataset}: predicted floor is {ratio:.2f}× the measured one"


def test_eight_gpu_nccl_rings_meet_the_issue_target(report: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    # The case inference cares most about (tensor parallelism over a whole NVSwitch node) meets the 15 % target.
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        row = report[("aiconfigurator-nccl", op, "8 GPUs")]
        assert row["median_ape"] <= 0.15, (op, row["median_ape"])
