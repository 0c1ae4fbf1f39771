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
    "llmcompass": (0.08, 0.39),  # 7.3 %, 38.4 %: met
    "aiconfigurator-custom": (0.16, 0.37),  # 15.6 %, 36.4 %: 2- and 4-GPU NCCL rings above 2 MiB run slower
    # 23.7 %, 47.0 %: missed. NCCL reaches 205-222 GB/s busbw on 8 GPUs at 512 MiB (the catalogue's 0.78 of
    # NVLink is its 16 GiB figure) but only 150-193 GB/s on 2 GPUs; the 8-GPU rows alone are within 8-16 %.
    # NCCL's own tuning model (2.27.3) gives every GPU count of one node the same bus bandwidth. The 512 MiB times
    # of all three ring ops at 2, 4 and 8 GPUs follow V/B·(k(n−1) + f)/n within 2 % (B 219-228 GB/s, f 0.34-0.46 of
    # a step per ring pass): a cost per pass that no cited source names, so it is not in the model.
    "aiconfigurator-nccl": (0.24, 0.48),
    # 18.0 %, 54.1 %: the 4-GPU ring over PCIe is within 5 %; vidur's send_recv runs faster than the NVLink bridge
    # can carry (334 GB/s one way), so its timing cannot cover the whole transfer.
    "vidur-a100_pairwise_nvlink": (0.19, 0.55),
    # 58.7 %, 80.1 %: missed. Across 2 nodes vidur's cluster moves ~8 GB/s per GPU (its own send_recv table), a
    # third of the DGX A100's 25 GB/s HDR InfiniBand per GPU that the validation assumes; inside one node 21-39 %.
    "vidur-a100_dgx": (0.59, 0.81),
    # 16.7 %, 45.3 %: missed, was 45.0 % as both axes of the 2x2 at once. Each chip takes in 89 GB/s, one link's worth
    # (100 GB/s one way): one unidirectional ring over the 4 chips (bench.validate_collectives.tpu7x_slice). The
    # rest is a ~17 µs fixed cost of the timed JAX program (the intercept from 64 to 256 MiB) against the 1.5 µs
    # assumed, and 0.9 of the link reached against 0.75: neither is read off this table.
    "tpu7x": (0.17, 0.46),
}
# Small-message floor (predicted / measured, 10th percentiles of messages ≤ 64 KiB): within 2× where it is met.
FLOORS = ("aiconfigurator-nccl", "aiconfigurator-custom", "llmcompass", "vidur-a100_pairwise_nvlink", "vidur-a100_dgx")


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
