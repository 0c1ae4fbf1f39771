"""Kernels and estimates (`roofline.single`, `roofline.chain`, `roofline.Estimate`): where the bound flips, fusion
never adding traffic (Hypothesis), and the backward pass of elementwise chains with intermediates stored or
recomputed. On the A100 profile (tests/roofline/profiles.py) or hardware drawn at random.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline
from tests.roofline.profiles import A100

A100_NO_LAUNCH = replace(A100, launch_s=0.0)  # a request's launch_overhead_s = 0
VECTOR_PEAK = A100.vector_peak("fp32")  # the fp32 vector rate, 19.5 TF: the worked cases below use it
PROPERTIES = settings(max_examples=60, deadline=None)


# --- the ridge point -----------------------------------------------------------------------------------------------


hardware = st.builds(
    lambda peak, bw, eff_v, eff_m: replace(
        A100_NO_LAUNCH,
        vector_flops_per_s={"fp32": peak},
        memory_bytes_per_s=bw,
        eff_vector=eff_v,
        eff_memory=eff_m,
        special_function_ops_per_s=None,
        memory_latency_s=None,  # the pure roofline; the latency limits are tested in ops/test_memory_bound.py
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


# --- fusion never adds traffic -------------------------------------------------------------------------------------


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


# --- recomputation (seed 002: three stacked sigmoids) --------------------------------------------------------------


def one(x: object) -> float:
    return float(np.asarray(x))


def sigmoids(hw: roofline.Hardware, n: int) -> list[list[roofline.Kernel]]:
    return [roofline.activation(hw, n, "sigmoid", "bf16") for _ in range(3)]


@pytest.mark.parametrize("n", [1 << 20, 1 << 24])
def test_recomputing_a_chain_moves_five_eighths_of_storing_it(n: int) -> None:
    store = roofline.chain(sigmoids(A100, n), A100, True, 19.5e12, 0.0, backward="store")
    recompute = roofline.chain(sigmoids(A100, n), A100, True, 19.5e12, 0.0, backward="recompute")
    # Stored: forward reads x, writes s1, s2, out (4); backward reads dout, s1, s2, writes dx (4): 8 tensors.
    # Recomputed: forward reads x, writes out (2); backward reads dout and x, writes dx (3): 5 tensors.
    assert one(store.bytes) == 8 * 2 * n and one(recompute.bytes) == 5 * 2 * n
    # FLOPs: 3 sigmoids of 3 FLOPs forward; backward twice that, plus the forward again when recomputing.
    assert one(store.flops) == 9 * n + 18 * n and one(recompute.flops) == 9 * n + 27 * n
    assert one(recompute.time_s) < one(store.time_s)  # memory-bound: fewer bytes win


def test_an_unfused_chain_stores_every_op_and_cannot_recompute() -> None:
    n = 1 << 20
    unfused = roofline.chain(sigmoids(A100, n), A100, False, 19.5e12, 0.0, backward="store")
    # Forward: 3 kernels of read + write (6); backward: 3 kernels reading a gradient and a saved input, writing a
    # gradient (9): 15 tensors.
    assert one(unfused.bytes) == 15 * 2 * n
    with pytest.raises(ValueError, match="recompute needs a fused chain"):
        roofline.chain(sigmoids(A100, n), A100, False, 19.5e12, 0.0, backward="recompute")
    with pytest.raises(ValueError, match="elementwise ops"):
        roofline.chain([roofline.matmul(A100, 64, 64, 64)], A100, True, 19.5e12, 0.0, backward="store")


# --- the two combination norms, set per profile (leave-one-device-out re-derivation) -------------------------------


def test_overlap_norm_on_the_profile_replaces_the_shipped_one() -> None:
    """A kernel of 3 µs math and 4 µs memory, no fixed cost: ‖(3, 4)‖₂ = 5 µs with overlap_norm 2; the shipped
    p = 3 gives (27 + 64)^(1/3) = 4.498 µs; None keeps the shipped one."""
    assert roofline.kernel_time(3e-6, 4e-6, 0.0, overlap_norm=2.0) == pytest.approx(5e-6, rel=1e-12)
    assert roofline.kernel_time(3e-6, 4e-6, 0.0) == pytest.approx(91.0 ** (1 / 3) * 1e-6, rel=1e-12)
    kernel = roofline.elementwise(A100_NO_LAUNCH, np.asarray(1e8), inputs=1, outputs=1)[0]
    shipped = roofline.single([kernel], A100_NO_LAUNCH, VECTOR_PEAK, 0.0)
    same = roofline.single([kernel], replace(A100_NO_LAUNCH, overlap_norm=None), VECTOR_PEAK, 0.0)
    assert float(same.time_s) == float(shipped.time_s)


def test_memory_queueing_norm_on_the_profile_replaces_the_shipped_one() -> None:
    """A streaming kernel held by two limits: with the norm 1 its memory time is the sum of bytes over each rate
    (Lazowska et al.'s balanced-job bound), computed here by hand from the profile's figures."""
    hw = replace(A100_NO_LAUNCH, memory_queueing_norm=1.0)
    elements = 1e8
    kernel = roofline.elementwise(hw, np.asarray(elements), inputs=1, outputs=1, access="scalar")[0]
    moved = 2.0 * 2.0 * elements  # bf16 in and out
    bw = hw.memory_bytes_per_s * hw.eff_memory
    in_flight = hw.units * (hw.threads_per_unit or 0) * 2.0 / (hw.memory_latency_s or 0.0)  # one bf16 per thread
    assert float(kernel.memory_s(hw, moved)) == pytest.approx(moved / bw + moved / in_flight, rel=1e-12)


# --- a warm-cache timing scope (roofline.Hardware.warm_cache) -------------------------------------------------------


def _tiled(in_bytes: float, out_bytes: float) -> roofline.Kernel:
    return roofline.Kernel(flops=0.0, matrix_s=0.0, vector_flops=0.0, sfu_ops=0.0, external_in_bytes=in_bytes,
                           chained_in_bytes=0.0, out_bytes=out_bytes, peak=1.0, unit="matrix")  # fmt: skip


def test_a_warm_cache_serves_a_kernel_that_fits_from_l2_and_no_slower_than_memory() -> None:
    """A device of 100 units at 1 GHz without a published L2 bandwidth: its L2 serves 100 × 1e9 × 19 B/s = 1.9 TB/s
    (roofline.L2_SHARED_READ_BYTES_PER_CLOCK_PER_UNIT), from a 40 MB L2, against 1 TB/s of device memory (efficiencies
    1). 8 MB in and 8 MB out: 16 µs cold, 16e6 / 1.9e12 = 8.42 µs warm; 25 + 25 MB does not fit: 50 µs either way.
    With 4 TB/s of device memory the L2 is the slower path: 4 µs, warm or not."""
    hw = roofline.Hardware(name="toy", units=100, matrix_flops_per_s={"bf16": 1e15}, vector_flops_per_s={"fp32": 1e13},
                           memory_bytes_per_s=1e12, memory_capacity_bytes=80e9, launch_s=0.0, eff_matmul=1.0,
                           eff_vector=1.0, eff_memory=1.0, cache_bytes=40e6, clock_hz=1e9,
                           architecture="sm_80")  # fmt: skip
    warm = replace(hw, warm_cache=True)
    for profile, expected in ((hw, 16e-6), (warm, 16e6 / 1.9e12)):
        est = roofline.single([_tiled(8e6, 8e6)], profile, 1e13, 0.0)
        assert float(est.memory_s) == pytest.approx(expected, rel=1e-12)
    big = roofline.single([_tiled(25e6, 25e6)], warm, 1e13, 0.0)
    assert float(big.memory_s) == pytest.approx(50e-6, rel=1e-12)
    fast = replace(warm, memory_bytes_per_s=4e12)
    assert float(roofline.single([_tiled(8e6, 8e6)], fast, 1e13, 0.0).memory_s) == pytest.approx(4e-6, rel=1e-12)


# --- a matrix product's operand stream (roofline.MATMUL_STREAM_EFFICIENCY, Hardware.warm_operands) ----------------


def test_a_memory_bound_product_streams_its_operands_at_the_stream_fraction_of_a_copy() -> None:
    """A decode-shaped product on a GPU of 1 TB/s (efficiencies 1, math 1e18 FLOP/s: memory-bound): m = 1,
    n = k = 8192 in bf16 moves 2·(8192 + 8192² + 8192) B = 134 250 496 B. As a copy it would take 134.25 µs; the
    product's stream reaches 0.90 of it (decision 0041): 149.17 µs. A TPU or CPU profile keeps the copy's rate, and a
    re-derived fraction (`matmul_stream_efficiency`, bench.loo) replaces the shipped one. The elementwise kernel
    after it (a streaming kernel, not a product) moves at the copy's rate."""
    hw = roofline.Hardware(name="toy", units=100, matrix_flops_per_s={"bf16": 1e18}, vector_flops_per_s={"fp32": 1e18},
                           memory_bytes_per_s=1e12, memory_capacity_bytes=80e9, launch_s=0.0, eff_matmul=1.0,
                           eff_vector=1.0, eff_memory=1.0)  # fmt: skip
    moved = 2.0 * (8192 + 8192 * 8192 + 8192)
    assert roofline.MATMUL_STREAM_EFFICIENCY == 0.90
    rederived = replace(hw, matmul_stream_efficiency=0.8)
    for profile, rate in ((hw, 0.90e12), (replace(hw, kind="tpu"), 1e12), (rederived, 0.8e12)):
        est = roofline.single(roofline.matmul(profile, 1, 8192, 8192), profile, 1e18, 0.0)
        assert float(est.memory_s) == pytest.approx(moved / rate, rel=1e-9)
    relu = roofline.single(roofline.matmul(hw, 1, 8192, 8192, epilogue=("relu",), fuse_epilogue=False), hw, 1e18, 0.0)
    assert float(relu.memory_s) == pytest.approx(moved / 0.90e12 + 2 * 2 * 8192 / 1e12, rel=1e-6)


def test_warm_operands_serve_only_the_products_from_l2() -> None:
    """`warm_operands` (a GEMM benchmark that cycles a few weight copies): the product whose 8 + 8 MB fit the 40 MB L2
    reads them at the L2's 100 × 1e9 × 19 B/s = 1.9 TB/s (8.42 µs) instead of 16 MB / (0.9 × 1 TB/s) = 17.8 µs; a
    streaming kernel of the same bytes stays at device memory's 16 µs, as it does cold."""
    hw = roofline.Hardware(name="toy", units=100, matrix_flops_per_s={"bf16": 1e15}, vector_flops_per_s={"fp32": 1e13},
                           memory_bytes_per_s=1e12, memory_capacity_bytes=80e9, launch_s=0.0, eff_matmul=1.0,
                           eff_vector=1.0, eff_memory=1.0, cache_bytes=40e6, clock_hz=1e9,
                           architecture="sm_80")  # fmt: skip
    product = replace(_tiled(8e6, 8e6), operand_stream=True)
    stream = replace(_tiled(8e6, 8e6), access_bytes=16.0)
    cold, warm = hw, replace(hw, warm_operands=True)
    assert float(roofline.single([product], cold, 1e13, 0.0).memory_s) == pytest.approx(16e6 / 0.9e12, rel=1e-12)
    assert float(roofline.single([product], warm, 1e13, 0.0).memory_s) == pytest.approx(16e6 / 1.9e12, rel=1e-12)
    assert float(roofline.single([stream], warm, 1e13, 0.0).memory_s) == pytest.approx(
        float(roofline.single([stream], cold, 1e13, 0.0).memory_s), rel=1e-12
    )
