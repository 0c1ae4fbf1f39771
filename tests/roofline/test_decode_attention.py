"""TensorRT-LLM's XQA decode kernel (`roofline._ops`, XQA_*), by hand on the A100 profile.

Figures from its source (TensorRT-LLM XQA mha.cu, FlashInfer 0.7.2 port, csrc/xqa/mha.cu): one 256-thread block per
SM, three loads in series before the first product (sequence length, page index, K tile), keys split over
min(max(1, ⌊108 / (batch · kv heads)⌋), ⌈keys / 256⌉) blocks, combined by the last block in the same kernel.
Profile: 108 SMs, 650 ns memory latency (RL-ASSUME), 2039e9 B/s × 0.90, bf16.
"""

from __future__ import annotations

import pytest

import roofline
from adapters import to_core
from hardware_db import load_yaml
from hardware_db._loader import HARDWARE_DIR
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareCreate

SPEC = HardwareCreate.model_validate(load_yaml(HARDWARE_DIR / "a100-sxm-80gb.yaml"))
A100 = to_core(SPEC, EstimateContext(hardware=SPEC.slug))
LATENCY = 650e-9
BW = 2039e9 * 0.9


def test_every_wave_of_xqa_blocks_waits_for_three_loads_in_series() -> None:
    # 1080 sequences, 8 query heads on 1 K/V head (XQA), 2 cached keys: 1080 blocks, 10 waves of 108. A wave's tiles
    # (16-row query 4096 B, output 4096 B, K and V of 2 keys 1024 B, × 108 blocks) take 0.54 µs, less than the
    # sequence length's, the page index's and the K tile's round trips: 3 × 650 ns per wave.
    assert (4096 + 4096 + 1024) * 108 / BW < 3 * LATENCY
    (kernel,) = roofline.attention(A100, 1080, 8, 1, 128, 1, 2)
    assert float(kernel.extra["ctas"]) == 1080.0 and float(kernel.extra["kv_splits"]) == 1.0
    assert float(kernel.exposed_s) == pytest.approx(10 * 3 * LATENCY, rel=1e-12)
    assert float(kernel.launches) == 1.0
    # Masked MHA (one query head per K/V head) keeps the block table's two round trips.
    (mha,) = roofline.attention(A100, 1080, 1, 1, 128, 1, 2)
    assert float(mha.exposed_s) == pytest.approx(10 * 2 * LATENCY, rel=1e-12)


def test_xqa_splits_a_long_cache_by_its_rule_and_merges_in_the_same_kernel() -> None:
    # One sequence, one K/V head, 16 384 keys: min(⌊108 / 1⌋, ⌈16384 / 256⌉) = 64 blocks, one wave. Each waits for
    # its query tile (4096 B), its fp32 partial output (16 × 128 × 4 = 8192 B) and its first K/V block
    # (2 × 128 keys × 128 × 2 B = 65 536 B) at 64 blocks' share of bandwidth (2.71 µs, over the 3 round trips). The
    # last block then merges: the semaphore, the 64 row maxima 8 at a time (8), each of the 2 V warp groups' 32
    # tiles two at a time (16): 25 round trips. No second kernel.
    (kernel,) = roofline.attention(A100, 1, 8, 1, 128, 1, 16384)
    assert float(kernel.extra["kv_splits"]) == 64.0 and float(kernel.extra["ctas"]) == 64.0
    assert float(kernel.launches) == 1.0
    bandwidth_share = (4096 + 8192 + 65536) * 64 / BW
    assert bandwidth_share > 3 * LATENCY
    assert float(kernel.exposed_s) == pytest.approx(bandwidth_share + (1 + 8 + 16) * LATENCY, rel=1e-12)


def test_xqa_splits_no_more_ways_than_the_sms_allow_per_sequence() -> None:
    # 4 sequences × 2 K/V heads: ⌊108 / 8⌋ = 13, but 2048 keys are 8 steps of 256: 8 blocks each, 64 in all.
    # Merge: 1 + ⌈8 / 8⌉ + ⌈⌈8 / 2⌉ / 2⌉ = 4 round trips.
    (kernel,) = roofline.attention(A100, 4, 16, 2, 128, 1, 2048)
    assert float(kernel.extra["kv_splits"]) == 8.0 and float(kernel.extra["ctas"]) == 64.0
    assert float(kernel.launches) == 1.0
    assert float(kernel.exposed_s) == pytest.approx((4096 + 8192 + 65536) * 64 / BW + 4 * LATENCY, rel=1e-12)
    # 108 sequences × 1 K/V head fill the SMs: no split, whatever the length.
    (full,) = roofline.attention(A100, 108, 8, 1, 128, 1, 16384)
    assert float(full.extra["kv_splits"]) == 1.0 and float(full.extra["ctas"]) == 108.0


def test_other_kernels_combine_split_keys_in_a_second_launch() -> None:
    # Masked MHA and prefill keep FlashDecoding's split: when the keys are split, the partial outputs are summed by
    # a second kernel, so the op takes two launches. One sequence's single head leaves 107 of 108 SMs idle: split.
    for args in ((1, 1, 1, 128, 1, 16384), (1, 1, 1, 128, 16, 16384)):
        (kernel,) = roofline.attention(A100, *args)
        assert float(kernel.extra["kv_splits"]) > 1.0, args
        assert float(kernel.launches) == 2.0, args
