"""NCCL 2.29.7's own tuning model as `bench/nccl_regimes.py` writes it, against times worked out by hand from the
constants of NCCL's `src/graph/tuning.cc` (baseLat, hwLat[NVLink], llMaxBw, the LL/LL128 refinements) on an A100
ring graph of 12 channels × 20 GB/s."""

from __future__ import annotations

import pytest

from bench import nccl_regimes as nr

MIB = 2**20


def test_simple_all_gather_on_2_gpus_at_2_mib() -> None:
    # 8.4 + 1 × 3.4 µs; 240 GB/s × 2/1 = 480 GB/s: 2 097 152 B / 480 000 B/µs = 4.369 µs.
    assert nr.nccl_time_us("all_gather", 2, 2 * MIB, "Simple") == pytest.approx(11.8 + 4.3691, abs=1e-3)


def test_ll_is_capped_by_ll_max_bw() -> None:
    # min(87.7, 240 × .5) = 87.7 GB/s × 2/1; 6.6 + 0.6 µs; 1 048 576 / 175 400 = 5.978 µs.
    assert nr.nccl_time_us("all_gather", 2, MIB, "LL") == pytest.approx(7.2 + 5.9782, abs=1e-3)


def test_ll128_all_gather_on_8_gpus() -> None:
    # min(240 × .92, 12 × 20) = 220.8 GB/s × 8/7 = 252.34; 14.0 + 7 × 1.9 = 27.3 µs; 4 MiB / 252.34 = 16.621 µs.
    assert nr.nccl_time_us("all_gather", 8, 4 * MIB, "LL128") == pytest.approx(27.3 + 16.6215, abs=1e-3)


@pytest.mark.parametrize(
    ("op", "n", "size", "protocol"),
    [
        ("all_gather", 2, MIB, "LL"),  # LL 13.18, Simple 13.98, LL128 18.27 µs
        ("all_gather", 2, 2 * MIB, "Simple"),  # Simple 16.17, LL 19.16, LL128 20.65
        ("all_reduce", 2, MIB // 2, "LL"),  # LL 13.78, Simple 17.38
        ("all_reduce", 2, MIB, "Simple"),  # Simple 19.57 against LL 19.76
        ("all_reduce", 8, 4 * MIB, "LL128"),  # LL128 73.8, Simple 86.6, LL 98.7
        ("all_reduce", 8, 32 * MIB, "Simple"),  # Simple 300.7 against LL128 306.5
    ],
)
def test_nccl_picks_its_least_modelled_time(op: str, n: int, size: int, protocol: str) -> None:
    assert nr.nccl_pick(op, n, size) == protocol
