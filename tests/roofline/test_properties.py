"""Properties of the roofline core that must hold for every input, checked with Hypothesis.

The core is called directly (no HTTP), on the A100 SXM 80GB catalogue profile turned into a `roofline.Hardware` by
the service's own `to_core`, or on hardware drawn at random.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline
from adapters import to_core
from hardware_db import load_yaml
from hardware_db._loader import HARDWARE_DIR
from schemas.estimates import EstimateContext, Options
from schemas.hardware import HardwareCreate

SPEC = HardwareCreate.model_validate(load_yaml(HARDWARE_DIR / "a100-sxm-80gb.yaml"))
A100 = to_core(SPEC, EstimateContext(hardware=SPEC.slug))
A100_NO_LAUNCH = to_core(SPEC, EstimateContext(hardware=SPEC.slug, options=Options(launch_overhead_s=0)))
VECTOR_PEAK = A100.vector_peak("bf16")  # bf16 elementwise math runs at the fp32 vector rate on an A100

PROPERTIES = settings(max_examples=60, deadline=None)


def elementwise_time(hw: roofline.Hardware, **kwargs: Any) -> float:
    est = roofline.single(roofline.elementwise(hw, **kwargs), hw, hw.vector_peak("bf16"), hw.launch_s)
    return float(est.time_s)


def matmul_time(hw: roofline.Hardware, m: int, n: int, k: int) -> float:
    est = roofline.single(roofline.matmul(hw, m, n, k), hw, hw.vector_peak("bf16"), hw.launch_s)
    return float(est.time_s)


# --- more work never takes less time -------------------------------------------------------------------------------


@PROPERTIES
@given(
    elements=st.integers(1, 1 << 36),
    fpe=st.floats(0, 1000),
    more=st.floats(0, 1000),
    tpe=st.floats(0, 10),
)
def test_more_flops_per_element_never_take_less_time(elements: int, fpe: float, more: float, tpe: float) -> None:
    for hw in (A100, A100_NO_LAUNCH):
        fewer = elementwise_time(hw, elements=elements, flops_per_element=fpe, transcendentals_per_element=tpe)
        bigger = elementwise_time(hw, elements=elements, flops_per_element=fpe + more, transcendentals_per_element=tpe)
        assert bigger >= fewer


@PROPERTIES
@given(
    elements=st.integers(1, 1 << 36),
    more=st.integers(0, 1 << 36),
    inputs=st.integers(0, 4),
    outputs=st.integers(1, 4),
    fpe=st.floats(0, 1000),
)
def test_more_elements_or_tensors_never_take_less_time(
    elements: int, more: int, inputs: int, outputs: int, fpe: float
) -> None:
    for hw in (A100, A100_NO_LAUNCH):
        base = elementwise_time(hw, elements=elements, inputs=inputs, outputs=outputs, flops_per_element=fpe)
        kw = {"inputs": inputs, "outputs": outputs, "flops_per_element": fpe}
        assert elementwise_time(hw, elements=elements + more, **kw) >= base
        assert elementwise_time(hw, elements=elements, **{**kw, "inputs": inputs + 1}) >= base
        assert elementwise_time(hw, elements=elements, **{**kw, "outputs": outputs + 1}) >= base


@PROPERTIES
@given(m=st.integers(2048, 16384), n8=st.integers(256, 2048), k8=st.integers(1, 4096), more8=st.integers(0, 4096))
def test_a_deeper_matmul_never_takes_less_time(m: int, n8: int, k8: int, more8: int) -> None:
    """Larger k (more FLOPs and bytes) never lowers a matmul's time, for grids that fill the A100 (m, n ≥ 2048:
    at least 128 output tiles of any candidate on 108 SMs; the test below covers under-filled grids, where split-K
    applies). n and k stay multiples of 8 bf16 elements (16 bytes) so that both shapes are aligned: a misaligned k
    is slower by design (nanoGPT's 50257 → 50304)."""
    n, k, deeper = 8 * n8, 8 * k8, 8 * (k8 + more8)
    for hw in (A100, A100_NO_LAUNCH):
        assert matmul_time(hw, m, n, deeper) >= matmul_time(hw, m, n, k)


def test_an_under_filled_matmul_gets_no_faster_as_k_grows() -> None:
    """One output tile on 108 SMs (a decode GEMV), every aligned k up to 64k: time must not fall as k grows."""
    k = np.arange(8, 65536 + 8, 8, dtype=np.float64)
    for hw in (A100, A100_NO_LAUNCH):
        est = roofline.single(roofline.matmul(hw, 1, 8, k), hw, hw.vector_peak("bf16"), hw.launch_s)
        assert np.all(np.diff(est.time_s) >= 0)


# --- the tile and split-K search ----------------------------------------------------------------------------------


@PROPERTIES
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 40_000), st.integers(1, 40_000), st.integers(1, 40_000), st.integers(1, 8)),
        min_size=1,
        max_size=1200,  # more than one step of the search's chunks of points (`roofline._ops._SEARCH_CHUNK`)
    )
)
def test_a_matmul_over_an_array_of_shapes_gives_each_shape_its_own_answer(
    shapes: list[tuple[int, int, int, int]],
) -> None:
    """The search runs over every shape of an array at once: each point gets exactly (bit for bit) what a call
    with that shape alone gets: the same tile, split, waves and time."""
    m, n, k, b = (np.array(column, dtype=np.float64) for column in zip(*shapes, strict=True))
    (many,) = roofline.matmul(A100, m, n, k, b)
    for index in sorted({0, len(shapes) - 1, *range(0, len(shapes), 97)}):
        (one,) = roofline.matmul(A100, m[index], n[index], k[index], b[index])
        for name in ("tiles", "waves", "tile_m", "tile_n", "split_k", "exposed_s", "wave_efficiency"):
            assert many.extra[name][index] == one.extra[name], (name, shapes[index])
        assert many.matrix_s[index] == one.matrix_s


@PROPERTIES
@given(
    shape=st.tuples(st.integers(1, 40_000), st.integers(1, 40_000), st.integers(1, 40_000), st.integers(1, 8)),
    epilogue=st.sampled_from([(), ("bias",), ("bias", "gelu", "residual")]),
    fuse=st.booleans(),
    tile=st.sampled_from([None, (128, 64)]),
)
def test_one_point_in_floats_is_bit_for_bit_the_same_point_as_an_array(
    shape: tuple[int, int, int, int], epilogue: tuple[str, ...], fuse: bool, tile: tuple[int, int] | None
) -> None:
    """Plain numbers take the core's float path (`roofline._num`: a branch-and-bound loop over the tile candidates,
    Python arithmetic), an array the numpy grid: the same tile and split, and every term and detail to the last bit,
    except the time's overlap p-norm (`roofline._estimate.kernel_time`), whose `**` is libm's pow for a float and
    numpy's own (SIMD) power for an array: those agree to within an ulp or two."""
    m, n, k, b = shape

    def estimate(*sizes: Any) -> roofline.Estimate:
        kernels = roofline.matmul(A100, *sizes, tile=tile, epilogue=epilogue, fuse_epilogue=fuse)
        return roofline.single(kernels, A100, VECTOR_PEAK, A100.launch_s)

    one, many = estimate(m, n, k, b), estimate(*(np.array([x], dtype=np.float64) for x in shape))
    assert isinstance(one.time_s, float)  # the float path was taken
    for name in ("flops", "bytes", "compute_s", "memory_s", "overhead_s", "peak_flops_per_s"):
        assert getattr(one, name) == getattr(many, name)[0], name
    assert one.time_s == pytest.approx(float(many.time_s[0]), rel=1e-15, abs=0)
    assert one.extra.keys() == many.extra.keys()
    for name, value in one.extra.items():
        assert value == many.extra[name][0], name
    assert one.bound == many.bound[0]
    assert one.arithmetic_intensity == many.arithmetic_intensity[0]


@PROPERTIES
@given(
    batch=st.integers(1, 256),
    kv_heads=st.sampled_from([1, 2, 4, 8, 32]),
    group=st.sampled_from([1, 2, 8, 32, 48, 64, 128]),
    head_dim=st.sampled_from([64, 128, 256]),
    q_len=st.sampled_from([1, 1, 7, 512, 4096]),
    extra_keys=st.integers(0, 32_768),
    causal=st.booleans(),
    implementation=st.sampled_from(["flash", "naive"]),
)
def test_one_attention_in_floats_is_the_same_as_in_an_array(
    batch: int, kv_heads: int, group: int, head_dim: int, q_len: int, extra_keys: int, causal: bool,
    implementation: str,
) -> None:  # fmt: skip
    """Attention's float path (decode, prefill, masked MHA, split keys, naive) against its array path: every term
    and detail to the last bit, the time to the ulp of `kernel_time`'s pow."""
    sizes = (batch, kv_heads * group, kv_heads, head_dim, q_len, q_len + extra_keys)

    def estimate(*numbers: Any) -> roofline.Estimate:
        kernels = roofline.attention(A100, *numbers, causal=causal, implementation=implementation)
        return roofline.single(kernels, A100, VECTOR_PEAK, A100.launch_s)

    one, many = estimate(*sizes), estimate(*(np.array([x], dtype=np.float64) for x in sizes))
    assert isinstance(one.time_s, float)
    for name in ("flops", "bytes", "compute_s", "memory_s", "overhead_s", "peak_flops_per_s"):
        assert getattr(one, name) == getattr(many, name)[0], name
    assert one.time_s == pytest.approx(float(many.time_s[0]), rel=1e-15, abs=0)
    assert one.extra.keys() == many.extra.keys()
    for name, value in one.extra.items():
        assert value == np.ravel(many.extra[name])[0], name


@PROPERTIES
@given(m=st.integers(1, 20_000), n=st.integers(1, 20_000), k=st.integers(1, 20_000))
def test_the_searched_tile_is_never_slower_than_a_fixed_candidate(m: int, n: int, k: int) -> None:
    """The search picks the least math plus exposed time (with a split's second launch) among every tile candidate
    and split (`roofline.matmul`): fixing any one candidate (`tile=`) never gives less."""

    def searched_for(kernel: roofline.Kernel) -> float:
        return float(kernel.matrix_s + kernel.exposed_s + A100.launch_s * (kernel.launches - 1))

    (searched,) = roofline.matmul(A100, m, n, k)
    for tile in A100.tiles:
        (fixed,) = roofline.matmul(A100, m, n, k, tile=tile)
        assert searched_for(searched) <= searched_for(fixed)
        if (float(searched.extra["tile_m"]), float(searched.extra["tile_n"])) == tile:
            assert float(searched.matrix_s) == float(fixed.matrix_s)


# --- the ridge point ------------------------------------------------------------------------------------------------

hardware = st.builds(
    lambda peak, bw, eff_v, eff_m: replace(
        A100_NO_LAUNCH,
        vector_flops_per_s={"fp32": peak},
        memory_bytes_per_s=bw,
        eff_vector=eff_v,
        eff_memory=eff_m,
        special_function_ops_per_s=None,
        memory_latency_s=None,  # the pure roofline; the latency limits are tested in test_memory_parallelism.py
        cache_bandwidth_bytes_per_s=None,  # no L2 roof (one drawn device memory could outrun the A100's L2)
    ),
    peak=st.floats(1e11, 1e16),
    bw=st.floats(1e10, 1e14),
    eff_v=st.floats(0.05, 1.0),
    eff_m=st.floats(0.05, 1.0),
)


@PROPERTIES
@given(hw=hardware, elements=st.integers(1, 1 << 40), inputs=st.integers(1, 4), outputs=st.integers(1, 4))
def test_the_bound_flips_at_the_ridge_of_the_achievable_rates(
    hw: roofline.Hardware, elements: int, inputs: int, outputs: int
) -> None:
    """With no launch cost, an elementwise op is compute-bound exactly when its intensity exceeds

        I* = peak · eff_vector / (bandwidth · eff_memory)

    (compute time flops / (peak · eff_v) > memory time bytes / (bw · eff_m) ⇔ flops / bytes > I*): the ridge of the
    *achievable* rates. The core reports `critical_intensity` = peak / bandwidth, the datasheet ridge; the two differ
    by eff_vector / eff_memory (0.8 / 0.9 on an A100: the flip is at 8.5 FLOP/B, the reported ridge 9.6 FLOP/B), so
    an op whose intensity lies between them is reported compute-bound below the reported critical intensity.
    """
    peak = hw.vector_flops_per_s["fp32"]
    ridge = peak * hw.eff_vector / (hw.memory_bytes_per_s * hw.eff_memory)
    bytes_per_element = 2.0 * (inputs + outputs)  # bf16
    for side, factor in (("memory", 1 - 1e-6), ("compute", 1 + 1e-6)):
        fpe = ridge * bytes_per_element * factor  # intensity = fpe / bytes_per_element = ridge · factor
        kernels = roofline.elementwise(hw, elements, inputs, outputs, flops_per_element=fpe)
        est = roofline.single(kernels, hw, peak, 0.0)
        assert np.isclose(float(est.arithmetic_intensity), ridge * factor, rtol=1e-12)
        assert roofline.Bound(int(est.bound)).name == side
        assert float(est.critical_intensity) == peak / hw.memory_bytes_per_s


def test_on_the_a100_the_flip_lies_below_the_reported_ridge() -> None:
    """The worked case of the docstring above, on the catalogue profile: 19.5e12 FLOP/s, 2039e9 B/s, eff 0.8 / 0.9."""
    ridge = 19.5e12 * 0.8 / (2039e9 * 0.9)  # ≈ 8.50 FLOP/B
    fpe = 4.0 * 9.0  # bf16 in and out: 4 bytes per element → 9 FLOP/B, between 8.50 and 9.56
    est = roofline.single(
        roofline.elementwise(A100_NO_LAUNCH, 1 << 30, flops_per_element=fpe), A100_NO_LAUNCH, VECTOR_PEAK, 0.0
    )
    assert float(est.arithmetic_intensity) == 9.0 and ridge < 9.0 < float(est.critical_intensity)
    assert roofline.Bound(int(est.bound)) is roofline.Bound.compute


# --- fusion never adds traffic --------------------------------------------------------------------------------------


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[list[roofline.Kernel]], list[str]]:
    """Chains of 2-6 ops where each op consumes the previous output: a (rows × cols) tensor flows through
    elementwise ops, activations, and matmuls that take it as their A (m × k) or B (k × n) operand."""
    hw = A100
    rows, cols = draw(st.integers(1, 4096)), 8 * draw(st.integers(1, 1024))
    first = roofline.elementwise(hw, rows * cols, inputs=draw(st.integers(1, 3)))
    ops, names = [first], ["elementwise"]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["elementwise", "activation", "matmul_a", "matmul_b"]))
        elements = rows * cols
        if kind == "elementwise":
            inputs = draw(st.integers(1, 3))
            op = roofline.elementwise(
                hw, elements, inputs=inputs, chained_inputs=draw(st.integers(0, inputs)),
                flops_per_element=draw(st.floats(0, 50)), transcendentals_per_element=draw(st.floats(0, 2)),
            )  # fmt: skip
        elif kind == "activation":
            op = roofline.activation(hw, elements, draw(st.sampled_from(sorted(roofline.ACTIVATIONS))))
        elif kind == "matmul_a":  # previous output is A: m = rows, k = cols
            n = 8 * draw(st.integers(1, 1024))
            op = roofline.matmul(hw, rows, n, cols)
            cols = n
        else:  # previous output is B: k = rows, n = cols
            m = draw(st.integers(1, 4096))
            if m * rows == rows * cols:  # A would have B's size too: the core takes A first; keep B unambiguous
                m += 1
            op = roofline.matmul(hw, m, cols, rows)
            rows = m
        ops.append(op)
        names.append(kind)
    return ops, names


@PROPERTIES
@given(chain=chains())
def test_a_fused_chain_never_moves_more_bytes_than_unfused(
    chain: tuple[list[list[roofline.Kernel]], list[str]],
) -> None:
    ops, names = chain
    copy = [[replace(k, extra=dict(k.extra)) for k in op] for op in ops]  # chain() rewires its inputs in place
    fused = roofline.chain(ops, A100, True, VECTOR_PEAK, A100.launch_s)
    unfused = roofline.chain(copy, A100, False, VECTOR_PEAK, A100.launch_s)
    assert float(fused.bytes) <= float(unfused.bytes) * (1 + 1e-12), names
    assert float(fused.flops) == float(unfused.flops)


# --- PyTorch's vectorized layer norm (roofline._ops.LAYERNORM_BLOCK_THREADS), by hand on the A100 profile ----------
# 108 SMs × 2048 threads, 650 ns latency (RL-ASSUME), 2039e9 B/s × 0.90, 40 MiB L2 (41 943 040 B).


def _layernorm_memory_s(rows: int, cols: int) -> float:
    est = roofline.single(roofline.layernorm(A100_NO_LAUNCH, rows, cols, "fp16"), A100_NO_LAUNCH, VECTOR_PEAK, 0.0)
    return float(est.memory_s)


def _queued(moved: float, trips: float) -> float:
    """Streaming time with one 8-byte load (4 fp16) per resident thread in flight, combined with the bandwidth and
    with a thread's `trips` round trips by the 2-norm (`roofline._kernels.MEMORY_QUEUEING_NORM`)."""
    in_flight = 108 * 2048 * 8 / 650e-9
    streaming = moved * ((1 / (2039e9 * 0.9)) ** 2 + (1 / in_flight) ** 2) ** 0.5
    return float((streaming**2 + (trips * 650e-9) ** 2) ** 0.5)


def test_one_layer_norm_row_is_a_chain_of_round_trips() -> None:
    # One 2560-wide row: 2560 / (128 threads × 4) = 5 trips per pass, two passes: 10 round trips (6.5 µs) against
    # 20 480 B (x in and y out, scale and shift) that stream in 12 ns.
    moved = 2 * 2560 * 2 + 2 * 2560 * 2
    assert _layernorm_memory_s(1, 2560) == pytest.approx(_queued(moved, 10), rel=1e-12)
    assert _layernorm_memory_s(1, 2560) == pytest.approx(6.5e-6, rel=1e-3)


def test_layer_norm_rows_that_outgrow_l2_are_read_twice_from_memory() -> None:
    # 1728 resident blocks (221 184 threads / 128): rows of 4096 fp16 are 14.2 MB together, under 40 MiB: the second
    # pass hits L2. Rows of 32 768 are 113 MB: it reads device memory again.
    fits = _layernorm_memory_s(4096, 4096)
    spills = _layernorm_memory_s(4096, 32768)
    assert fits == pytest.approx(_queued(2 * 4096 * 4096 * 2 + 2 * 4096 * 2, 2 * 8), rel=1e-12)
    assert spills == pytest.approx(_queued(3 * 4096 * 32768 * 2 + 2 * 32768 * 2, 2 * 64), rel=1e-12)


def test_every_wave_of_decode_tiles_waits_for_its_first_kv_page() -> None:
    # 1080 sequences, one head, 2 cached keys: 1080 decode thread blocks in 10 waves of 108. A wave's first loads
    # (16-row query tile 4096 B, K and V of 2 keys 1024 B, output tile 4096 B, × 108 blocks at 2039e9 × 0.9 B/s)
    # take 0.54 µs, less than the block table's round trip and then the page's: 2 × 650 ns per wave.
    (kernel,) = roofline.attention(A100, 1080, 1, 1, 128, 1, 2)
    assert float(kernel.extra["kv_splits"]) == 1.0
    assert float(kernel.exposed_s) == pytest.approx(10 * 2 * 650e-9, rel=1e-12)
    # A prefill tile reads K and V where the projection wrote them: its wait is the bandwidth share alone.
    (prefill,) = roofline.attention(A100, 1080, 1, 1, 128, 2, 2)
    assert float(prefill.exposed_s) < 10 * 650e-9


# --- L2 re-reads (Hardware.cache_bandwidth_bytes_per_s), by hand on the A100 profile --------------------------------
# L2: 5120 B/clk × 1.41 GHz = 7.2192e12 B/s (A100 whitepaper), × 0.90 achievable; 40 MiB. Masked-MHA decode blocks
# have 256 threads: 108 × 2048 / 256 = 864 resident blocks.


def test_the_service_maps_the_l2_bandwidth_of_the_profile() -> None:
    assert A100.cache_bandwidth_bytes_per_s == pytest.approx(5120 * 1.41e9, rel=1e-12)


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
    # Without an L2 bandwidth every head's read comes from device memory, as before the figure existed.
    (unknown,) = roofline.attention(replace(A100, cache_bandwidth_bytes_per_s=None), 8, 64, 1, 128, 1, 4096)
    assert float(unknown.external_in_bytes) == 64 * unique and float(unknown.cache_in_bytes) == 0.0


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
