"""Attention (`roofline.ops.attention`): the flash tile schedule's waits, TensorRT-LLM's XQA decode kernel, masked
MHA's K/V re-reads from L2, by hand on the A100 profile (tests/roofline/profiles.py), and the float path against the
array path.

XQA figures from its source (TensorRT-LLM XQA mha.cu, FlashInfer 0.7.2 port, csrc/xqa/mha.cu): one 256-thread block
per SM, three loads in series before the first product (sequence length, page index, K tile), keys split over
min(max(1, ⌊108 / (batch · kv heads)⌋), ⌈keys / 256⌉) blocks, combined by the last block in the same kernel.
Profile: 108 SMs, 650 ns memory latency (RL-ASSUME), 2039e9 B/s × 0.90, bf16.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline
from tests.roofline.profiles import A100, H100

A100_NO_LAUNCH = replace(A100, launch_s=0.0)  # a request's launch_overhead_s = 0
VECTOR_PEAK = A100.vector_peak("fp32")  # the fp32 vector rate, as adapters.evaluate passes it
PROPERTIES = settings(max_examples=60, deadline=None)
LATENCY = 650e-9
BW = 2039e9 * 0.9


# --- one point in floats, many in an array -------------------------------------------------------------------------


@PROPERTIES
@given(
    batch=st.integers(1, 256),
    kv_heads=st.sampled_from([1, 2, 4, 8, 32]),
    group=st.sampled_from([1, 2, 8, 32, 48, 64, 128]),
    head_dim=st.sampled_from([64, 128, 256]),
    q_len=st.sampled_from([1, 1, 7, 512, 4096]),
    extra_keys=st.integers(0, 32_768),
    causal=st.booleans(),
    implementation=st.sampled_from(["flash", "flash2", "naive", "fused_per_head"]),
    window=st.sampled_from([None, 128, 4096]),
    hopper=st.booleans(),
)
def test_one_attention_in_floats_is_the_same_as_in_an_array(
    batch: int, kv_heads: int, group: int, head_dim: int, q_len: int, extra_keys: int, causal: bool,
    implementation: str, window: int | None, hopper: bool,
) -> None:  # fmt: skip
    """Attention's float path (decode, prefill, masked MHA, split keys, naive, Hopper's kernels, FlashAttention-2)
    against its array path: every term and detail to the last bit, the time to the ulp of `kernel_time`'s pow."""
    sizes = (batch, kv_heads * group, kv_heads, head_dim, q_len, q_len + extra_keys)
    hw = H100 if hopper else A100

    def estimate(*numbers: Any) -> roofline.Estimate:
        w = None if window is None or not causal else float(window)
        kernels = roofline.attention(hw, *numbers, causal=causal, implementation=implementation, window=w)
        return roofline.single(kernels, hw, hw.vector_peak("fp32"), hw.launch_s)

    one, many = estimate(*sizes), estimate(*(np.array([x], dtype=np.float64) for x in sizes))
    assert isinstance(one.time_s, float)
    for name in ("flops", "bytes", "compute_s", "memory_s", "overhead_s", "peak_flops_per_s"):
        assert getattr(one, name) == getattr(many, name)[0], name
    assert one.time_s == pytest.approx(float(many.time_s[0]), rel=1e-15, abs=0)
    assert one.extra.keys() == many.extra.keys()
    for name, value in one.extra.items():
        assert value == np.ravel(many.extra[name])[0], name


# --- the flash tile schedule's waits -------------------------------------------------------------------------------


def test_every_wave_of_decode_tiles_waits_for_its_first_kv_page() -> None:
    # 1080 sequences, one head, 2 cached keys: 1080 decode thread blocks in 10 waves of 108. A wave's first loads
    # (16-row query tile 4096 B, K and V of 2 keys 1024 B, output tile 4096 B, × 108 blocks at 2039e9 × 0.9 B/s)
    # take 0.54 µs, less than the block table's round trip and then the page's: 2 × 650 ns per wave.
    (kernel,) = roofline.attention(A100, 1080, 1, 1, 128, 1, 2)
    assert float(kernel.extra["kv_splits"]) == 1.0
    assert float(kernel.exposed_s) == pytest.approx(10 * 2 * 650e-9, rel=1e-12)
    # A prefill tile reads the paged cache too, through the sequence's offsets first: 3 round trips per wave.
    (prefill,) = roofline.attention(A100, 1080, 1, 1, 128, 2, 2)
    assert float(prefill.exposed_s) == pytest.approx(10 * 3 * 650e-9, rel=1e-12)


# --- L2 re-reads (Hardware.cache_bandwidth_bytes_per_s), by hand on the A100 profile -------------------------------
# L2: 5120 B/clk × 1.41 GHz = 7.2192e12 B/s (A100 whitepaper), × 0.90 achievable; 40 MiB. Masked-MHA decode blocks
# have 256 threads: 108 × 2048 / 256 = 864 resident blocks.


def test_masked_mha_reads_the_shared_kv_once_from_memory_and_again_from_l2() -> None:
    # 8 sequences, 64 query heads on 1 K/V head (a group over XQA's 32: one block per query head), 4096 keys:
    # K and V are 2 × 2 B × 8 × 4096 × 128 = 16 777 216 B. 864 resident blocks cover ceil(864 / 64) = 14 ≥ 8 groups,
    # whose K/V (16.8 MB) fit in 40 MiB: the other 63 heads' reads hit L2.
    unique = 2 * 2 * 8 * 4096 * 128
    q_and_out = 2 * (2 * 8 * 64 * 128)
    (kernel,) = roofline.attention(A100, 8, 64, 1, 128, 1, 4096)
    assert float(kernel.external_in_bytes) == unique
    assert float(kernel.cache_in_bytes) == 63 * unique
    est = roofline.single([kernel], A100, VECTOR_PEAK, 0.0)
    # The L2 roof holds: every byte passes through it, 1.07 GB at 6.50 TB/s (165 µs), against 17 MB of HBM (9 µs).
    assert float(est.memory_s) == pytest.approx((unique + q_and_out + 63 * unique) / (7.2192e12 * 0.9), rel=1e-12)
    assert float(est.bytes) == unique + q_and_out
    # Without an L2 bandwidth or a clock every head's read comes from device memory, as before the figure existed.
    no_l2 = replace(A100, cache_bandwidth_bytes_per_s=None, clock_hz=None)
    (unknown,) = roofline.attention(no_l2, 8, 64, 1, 128, 1, 4096)
    assert float(unknown.external_in_bytes) == 64 * unique and float(unknown.cache_in_bytes) == 0.0


def test_without_an_l2_bandwidth_an_nvidia_gpu_serves_shared_reads_at_a_rate_per_sm_and_clock() -> None:
    # The same decode on an A100 whose profile gives its clock (1.41 GHz) but no L2 bandwidth: the other 63 heads'
    # reads come from L2 at 108 SMs × 1.41e9 × 19 B = 2.89332e12 B/s (× 0.9), 1.06 GB in 406 µs; the device-memory
    # stream (17 MB + Q and O) is not charged to L2 a second time.
    unique = 2 * 2 * 8 * 4096 * 128
    hw = replace(A100, cache_bandwidth_bytes_per_s=None)
    assert hw.shared_l2_read_bytes_per_s == pytest.approx(108 * 1.41e9 * 19.0, rel=1e-15)
    (kernel,) = roofline.attention(hw, 8, 64, 1, 128, 1, 4096)
    assert float(kernel.external_in_bytes) == unique and float(kernel.cache_in_bytes) == 63 * unique
    est = roofline.single([kernel], hw, VECTOR_PEAK, 0.0)
    assert float(est.memory_s) == pytest.approx(63 * unique / (108 * 1.41e9 * 19.0 * 0.9), rel=1e-12)
    # Not an NVIDIA architecture: no rule, device memory as before.
    (other,) = roofline.attention(replace(hw, architecture="gfx942"), 8, 64, 1, 128, 1, 4096)
    assert float(other.cache_in_bytes) == 0.0


def test_masked_mha_groups_resident_together_share_their_kv_through_l2_however_long_the_cache() -> None:
    # 16 384 keys: each sequence's K/V is 8 388 608 B and 8 sequences' 67 MB outgrow 40 MiB, but the 64 blocks of a
    # group (≤ 864 resident) are dispatched together (head is blockIdx.x) and walk the keys in step: L2 holds the
    # window they share, so the other 63 heads' reads still hit it.
    unique = 2 * 2 * 8 * 16384 * 128
    (kernel,) = roofline.attention(A100, 8, 64, 1, 128, 1, 16384)
    assert float(kernel.external_in_bytes) == unique
    assert float(kernel.cache_in_bytes) == 63 * unique


def test_masked_mha_groups_larger_than_the_resident_blocks_outgrow_l2_and_read_device_memory() -> None:
    # 256 resident threads per SM: 108 × 256 / 256 = 108 resident blocks < a group of 128 query heads, which then runs
    # over several waves, so the whole of its K/V must stay in L2: 2 × 2 B × 16 384 × 128 = 8 388 608 B per sequence
    # for min(8, ⌈108 / 128⌉) = 1 resident group, over an L2 of 4 MiB: every head reads device memory.
    hw = replace(A100, threads_per_unit=256, cache_bytes=4 * 2**20)
    (kernel,) = roofline.attention(hw, 8, 128, 1, 128, 1, 16384)
    assert float(kernel.external_in_bytes) == 128 * 2 * 2 * 8 * 16384 * 128
    assert float(kernel.cache_in_bytes) == 0.0


def test_masked_mha_blocks_wait_for_their_first_kv_step_from_l2_but_one_per_group() -> None:
    # 8 sequences, 64 query heads on 1 K/V head, 128 keys: 512 blocks over 108 slots, 5 waves of 108. Each block
    # waits for its query tile (16 rows × 128 × 2 B), its first K/V step (2 × 128 keys × 128 × 2 B = 65 536 B) and its
    # output tile (16 × 128 × 2 B) before the math: the tiles at device memory's 2039e9 × 0.9 B/s, the K/V step there
    # for 1 of a group's 64 blocks and at L2's 7.2192e12 × 0.9 B/s for the other 63: 2.1 µs a wave, over the
    # page-table wait (2 × 650 ns).
    (kernel,) = roofline.attention(A100, 8, 64, 1, 128, 1, 128)
    hbm, l2 = 1 / (2039e9 * 0.9), 1 / (7.2192e12 * 0.9)
    tiles = 2 * 16 * 128 * 2 * hbm
    first_kv = 2 * 128 * 128 * 2 * (hbm / 64 + l2 * 63 / 64)
    assert float(kernel.exposed_s) == pytest.approx(5 * 108 * (tiles + first_kv), rel=1e-12)


# --- TensorRT-LLM's XQA decode kernel (roofline.ops.XQA_KV_ROUND_TRIPS), by hand on the A100 profile ---------------


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


def test_every_wave_of_prefill_tiles_waits_for_the_paged_cache_chain() -> None:
    # Prefill reads the paged cache the way XQA does (roofline.ops.CONTEXT_KV_ROUND_TRIPS = 3). 216 sequences of 16
    # tokens, one head of 64: 216 tiles of 16 rows, 2 waves of 108. A wave's query (2048 B), output (2048 B) and
    # first K and V block (4096 B) at 108 blocks' share of bandwidth take 0.48 µs, less than the chain of three
    # round trips: 2 × 3 × 650 ns.
    assert (2048 + 2048 + 4096) * 108 / BW < 3 * LATENCY
    (kernel,) = roofline.attention(A100, 216, 1, 1, 64, 16, 16)
    assert float(kernel.extra["ctas"]) == 216.0 and float(kernel.extra["kv_splits"]) == 1.0
    assert float(kernel.exposed_s) == pytest.approx(2 * 3 * LATENCY, rel=1e-12)


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


def test_naive_attention_writes_every_heads_scores_to_device_memory_on_an_h100() -> None:
    """Issue 21: 16 heads of 4096 × 4096 (batch 1, head_dim 128, bf16) on an H100. One head's scores (33.6 MB) fit in
    the 50 MB L2, but naive attention's two kernels each run over all 16 heads, so all of them go through HBM. By
    hand: Q, K, V, O are 4 × 16 · 4096 · 128 · 2 B = 67 108 864 B; the scores 16 · 4096² · 2 B = 536 870 912 B,
    written once and read once; FLOPs 4 · 16 · 4096² · 128 + 5 · 16 · 4096² (softmax) = 138 781 130 752."""
    h, n, d = 16, 4096, 128

    def run(implementation: str) -> roofline.Estimate:
        kernels = roofline.attention(H100, 1, h, h, d, n, n, causal=False, implementation=implementation)
        return roofline.single(kernels, H100, H100.vector_peak("fp32"), H100.launch_s)

    naive = run("naive")
    assert naive.flops == 4 * h * n * n * d + 5 * h * n * n == 138_781_130_752
    assert naive.bytes == 67_108_864 + 2 * 536_870_912 == 1_140_850_688
    assert naive.flops / naive.bytes == pytest.approx(121.6, abs=0.05)  # was 2 068 with the scores on chip
    # The per-head fused schedule keeps each head's 33.6 MB on chip (H100: 50 MB L2 + 132 × 228 KiB shared memory).
    per_head = run("fused_per_head")
    assert per_head.bytes == 67_108_864
    assert per_head.flops / per_head.bytes == pytest.approx(2068.0, abs=0.5)


# --- sliding windows -----------------------------------------------------------------------------------------------


def test_a_sliding_window_counts_the_pairs_each_query_sees() -> None:
    """Query at position p sees min(p + 1, w) keys. By hand: 8 prompt tokens, window 3: 1 + 2 + 3·6 = 21; a decode
    step over 100 keys, window 10: 10; 4 new tokens at positions 2-5 over 6 keys, window 4: 3 + 4 + 4 + 4 = 15."""
    assert roofline.causal_pairs(8.0, 8.0, 3.0) == 21.0
    assert roofline.causal_pairs(1.0, 100.0, 10.0) == 10.0
    assert roofline.causal_pairs(4.0, 6.0, 4.0) == 15.0
    assert roofline.causal_pairs(8.0, 8.0, 8.0) == roofline.causal_pairs(8.0, 8.0) == 36.0  # no narrower than kv


def test_a_windowed_decode_step_is_a_decode_step_over_the_window() -> None:
    """A decode step through a window of 128 keys reads and multiplies exactly what one over a 128-key cache does:
    FLOPs 4·b·h·128·d (+ 5 softmax operations per score); device-memory bytes Q, O and K, V of 128 keys once (the
    group of 128 query heads runs masked MHA, whose other 127 reads of K and V come from the A100's L2)."""
    shape = (8.0, 128.0, 1.0, 64.0, 1.0)
    windowed = roofline.single(
        roofline.attention(A100, *shape, 16_384.0, window=128.0), A100, VECTOR_PEAK, A100.launch_s
    )
    short = roofline.single(roofline.attention(A100, *shape, 128.0), A100, VECTOR_PEAK, A100.launch_s)
    assert windowed.time_s == short.time_s
    assert windowed.flops == 4.0 * 8 * 128 * 128 * 64 + 5.0 * 8 * 128 * 128
    assert windowed.bytes == 2 * (2.0 * 8 * 128 * 64) + 2 * (2.0 * 8 * 1 * 128 * 64)  # Q and O; K and V


def test_a_windowed_prefill_does_the_band_s_work_and_reads_the_band_s_keys() -> None:
    """8 sequences of 16 384 prompt tokens through a window of 128 keys, one head of 128: pairs per sequence =
    128·129/2 + (16 384 − 128)·128 = 2 089 024 (against 134 225 920 unwindowed). Each 128-row query block (A100:
    Br = min(⌈83 968 / 512⌉, 128) = 128) reads the keys of its band. The grid runs a head's 128 query blocks
    together, so the 108 SMs hold one sequence's K and V at a time (8 MiB, inside the 40 MiB L2): read once. With
    an L2 of 4 MiB they outgrow it, and every block reads its band from memory:
    ⌈16 384 / 128⌉ · (128 + 127) / 16 384 = 1.99 times."""
    kernel = roofline.attention(A100, 8.0, 1.0, 1.0, 128.0, 16_384.0, 16_384.0, window=128.0)[0]
    pairs = 128 * 129 / 2 + (16_384 - 128) * 128
    assert pairs == 2_089_024
    assert kernel.flops == 8 * (4.0 * pairs * 128 + 5.0 * pairs)
    assert kernel.extra["query_block_rows"] == 128.0
    assert kernel.extra["kv_reads"] == 1.0
    small_l2 = replace(A100, cache_bytes=4.0 * 2**20)
    spilled = roofline.attention(small_l2, 8.0, 1.0, 1.0, 128.0, 16_384.0, 16_384.0, window=128.0)[0]
    assert spilled.extra["kv_reads"] == pytest.approx(128 * 255 / 16_384)
    with pytest.raises(ValueError, match="causal"):
        roofline.attention(A100, 1.0, 1.0, 1.0, 128.0, 16.0, 16.0, causal=False, window=8.0)


def test_a_head_s_query_blocks_share_its_keys_in_l2_however_many_heads_the_call_has() -> None:
    """Causal prefill on an A100 (40 MiB L2, 108 SMs), 4 096 tokens, 32 heads of 128 (MHA): K and V are
    2 · 32 · 4 096 · 128 · 2 B = 64 MiB, more than the L2, but the grid runs each head's ⌈4 096 / 128⌉ = 32 query
    blocks together (FlashAttention-2's grid(num_m_block, b, h)), so ⌈108 / 32⌉ = 4 heads' K and V (8 MiB) are live
    at a time: read once. One query block per head (128 tokens) keeps 108 heads of 64 KiB (6.75 MiB) live: once."""
    long = roofline.attention(A100, 1.0, 32.0, 32.0, 128.0, 4096.0, 4096.0)[0]
    assert long.extra["kv_reads"] == 1.0
    assert long.external_in_bytes == pytest.approx(2 * 32 * 4096 * 128 * 2)
    many = roofline.attention(A100, 8.0, 32.0, 32.0, 128.0, 128.0, 128.0)[0]
    assert many.extra["kv_reads"] == 1.0


# --- kernel classes: Hopper's own prefill kernels and FlashAttention-2 ---------------------------------------------

H100_BW = 3.35e12 * 0.90


def test_hopper_prefill_hides_its_softmax_behind_the_products_and_waits_for_one_wave_only() -> None:
    # H100 (sm_90), 264 sequences of 4 096 tokens, one head of 128, causal. Hopper's kernel (FlashAttention-3 as
    # FlashInfer ports it): 128 × 128 tiles, 32 per head; per head 128·32·33 / (2·128) + 32/2 = 544 blocks, 1 088
    # per SM. A block's products 4·128·128·128 FLOPs at 989e12 × 0.81 (10.47 ns) outlast its softmax (5 fp32
    # operations and one exponential per score: 16 384 × 5 / (67e12 × 0.8) + 16 384 / (3.865e12 × 0.8) = 6.83 ns),
    # which overlaps them: 1 088 × 132 × 10.47 ns. A persistent grid waits for its first wave's tiles only: query,
    # output (32 768 B each) and first K/V block (65 536 B) of 132 blocks at the memory's share.
    products = 4 * 128 * 128 * 128 / (989e12 * 0.81)
    softmax = 16384 * 5 / (67e12 * 0.8) + 16384 / (3.865e12 * 0.8)
    assert products > softmax
    (native,) = roofline.attention(H100, 264, 1, 1, 128, 4096, 4096)
    assert float(native.extra["query_block_rows"]) == 128.0
    assert float(native.matrix_s) == pytest.approx(1088 * 132 * products, rel=1e-12)
    assert float(native.exposed_s) == pytest.approx(131072 * 132 / H100_BW, rel=1e-12)
    # FlashAttention-2 on the same GPU: its 128 × 64 tile (head_dim 128 off sm_86/sm_89), mma.sync at 2/3 of the
    # tensor peak, the softmax after the products; 128·32·33 / (2·64) + 16 = 1 072 blocks per head, every one of
    # 64 waves of 132 tiles (8 448) waiting for its query, output (32 768 B each) and first K/V block (32 768 B).
    products2 = 4 * 128 * 64 * 128 / (989e12 * 2 / 3 * 0.81)
    softmax2 = 8192 * 5 / (67e12 * 0.8) + 8192 / (3.865e12 * 0.8)
    (fa2,) = roofline.attention(H100, 264, 1, 1, 128, 4096, 4096, implementation="flash2")
    assert float(fa2.extra["kv_splits"]) == 1.0 and float(fa2.launches) == 1.0
    assert float(fa2.matrix_s) == pytest.approx(264 * 1072 * (products2 + softmax2), rel=1e-12)
    assert float(fa2.exposed_s) == pytest.approx(64 * 98304 * 132 / H100_BW, rel=1e-12)
    # The A100 (sm_80) runs no warp-specialised kernel: `flash` there is the tile schedule of before.
    (a100,) = roofline.attention(A100, 264, 1, 1, 128, 4096, 4096)
    assert float(a100.extra["query_block_rows"]) == 128.0
    assert float(a100.exposed_s) > 64 * 131072 * 108 / BW  # one wait per wave of 108 (8 448 tiles: 79 waves)


def test_flash2_splits_the_keys_by_flash_attention_2s_own_rule() -> None:
    # num_splits_heuristic(batch · heads · m-blocks, 2 · 132 SMs, key blocks, 128) on an H100, decode (one query).
    # 40 query heads on 8 K/V heads: the group of 5 runs as one 64-row tile per (sequence, K/V head): 8 tiles, far
    # below 0.8 × 264. 512 keys are 4 blocks of 128 (head_dim 128); 3 splits would walk 2 blocks each, as 2 do, so
    # 3 is not eligible; wave efficiencies 8/264, 16/264, 32/264: the fewest within 0.85 of the best is 4. A second
    # kernel combines them.
    (kernel, _) = roofline.attention(H100, 1, 40, 8, 128, 1, 512, implementation="flash2")
    assert float(kernel.extra["kv_splits"]) == 4.0 and float(kernel.launches) == 2.0
    assert float(kernel.extra["ctas"]) == 32.0
    # 640 keys: 5 blocks; 4 splits walk 2 blocks as 3 do (not eligible), 5 walk one: 40/264 is the best, 5 splits.
    (five, _) = roofline.attention(H100, 1, 40, 8, 128, 1, 640, implementation="flash2")
    assert float(five.extra["kv_splits"]) == 5.0
    # 256 sequences × 8 heads (no grouping: nothing swapped) fill 2048 ≥ 0.8 × 264 tiles: one split, one kernel.
    (full,) = roofline.attention(H100, 256, 8, 8, 128, 1, 4096, implementation="flash2")
    assert float(full.extra["kv_splits"]) == 1.0 and float(full.launches) == 1.0


def test_flash2_decode_copies_its_swapped_output_and_query_back_and_waits_two_loads_per_wave() -> None:
    # Grouped decode runs swapped (flash_api.cpp, seqlenq_ngroups_swapped); at its end the output and the query are
    # each copied back to the caller's layout: 2 kernels reading and writing b·h·d bf16 elements (4·32·128·2 B).
    (_, copies) = roofline.attention(H100, 4, 32, 4, 128, 1, 1024, implementation="flash2")
    assert float(copies.launches) == 2.0
    assert float(copies.external_in_bytes) == float(copies.out_bytes) == 2 * 4 * 32 * 128 * 2
    # 1 056 sequences, one head of 64, 2 cached keys: 1 056 tiles (no split: ≥ 0.8 × 264), 8 waves of 132. A block
    # waits for its Q and first K tile, and only then asks for V (flash_fwd_kernel.h): 2 latencies, more than a
    # wave's tiles (16-row query and output, 2 048 B each; K and V of 2 keys, 512 B) take at the memory's share.
    assert (2048 + 2048 + 512) * 132 / H100_BW < 2 * LATENCY
    (tiny,) = roofline.attention(H100, 1056, 1, 1, 64, 1, 2, implementation="flash2")
    assert float(tiny.extra["kv_splits"]) == 1.0
    assert float(tiny.exposed_s) == pytest.approx(8 * 2 * LATENCY, rel=1e-12)
