"""Memory-bound ops (`roofline.ops`: elementwise, activations, norms, embedding): more work never takes less time
(Hypothesis), Little's-law bandwidth for kernels with few bytes in flight, PyTorch's layer norm as a chain of round
trips, and XLA's per-element ALU costs. Numbers by hand from the A100 profile (tests/roofline/profiles.py): 108 SMs ×
2048 threads, 650 ns device-memory latency (RL-ASSUME), 2039e9 B/s × 0.90, 19.5e12 FP32 FLOP/s × 0.80, 40 MiB L2.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline
from roofline.ops import alu_cost
from tests.roofline.profiles import A100

A100_NO_LAUNCH = replace(A100, launch_s=0.0)  # a request's launch_overhead_s = 0
VECTOR_PEAK = A100.vector_peak("bf16")  # bf16 elementwise math runs at the fp32 vector rate on an A100
PROPERTIES = settings(max_examples=60, deadline=None)


# --- more work never takes less time -------------------------------------------------------------------------------


def elementwise_time(hw: roofline.Hardware, **kwargs: Any) -> float:
    est = roofline.single(roofline.elementwise(hw, **kwargs), hw, hw.vector_peak("bf16"), hw.launch_s)
    return float(est.time_s)


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


# --- Little's law: the bytes a kernel's threads keep in flight -----------------------------------------------------


BW = 2039e9 * 0.90
LATENCY = 650e-9
SCALAR_FP16_BW = 108 * 2048 * 2 / LATENCY  # 680.6 GB/s: one 2-byte load per resident thread in flight


def queued(moved: float, in_flight_bw: float) -> float:
    """Seconds for `moved` bytes under both limits, combined as `roofline._kernels.MEMORY_QUEUEING_NORM` = 2 says:
    moved · √(1/BW² + 1/in_flight_bw²)."""
    return moved * ((1 / BW) ** 2 + (1 / in_flight_bw) ** 2) ** 0.5


def one(x: object) -> float:
    return float(np.asarray(x))


def memory_s(kernels: list[roofline.Kernel], hw: roofline.Hardware = A100) -> float:
    return one(roofline.single(kernels, hw, hw.vector_peak("fp16"), 0.0).memory_s)


def test_the_profile_carries_the_latency_and_threads() -> None:
    assert A100.memory_latency_s == LATENCY and A100.threads_per_unit == 2048 and A100.architecture == "sm_80"
    assert pytest.approx(680.6e9, rel=1e-4) == SCALAR_FP16_BW


def test_a_scalar_rms_norm_runs_at_the_bandwidth_its_loads_in_flight_allow() -> None:
    rows = cols = 4096
    moved = 2 * rows * cols * 2 + cols * 2  # read x and write y in fp16, plus the scale vector
    scalar = roofline.layernorm(A100, rows, cols, "fp16", rms=True, access="scalar")
    vectorized = roofline.layernorm(A100, rows, cols, "fp16", rms=True)
    # 0.68 TB/s in flight against 1.84 TB/s of bandwidth: 0.64 TB/s.
    assert memory_s(scalar) == pytest.approx(queued(moved, SCALAR_FP16_BW), rel=1e-12)
    assert moved / memory_s(scalar) == pytest.approx(638.1e9, rel=1e-3)
    # 16-byte loads: 108 · 2048 · 16 B / 650 ns = 5.4 TB/s in flight, three times what HBM gives: 5 % below it.
    assert memory_s(vectorized) == pytest.approx(queued(moved, 8 * SCALAR_FP16_BW), rel=1e-12)
    assert moved / memory_s(vectorized) == pytest.approx(1.739e12, rel=1e-3)


def test_two_input_streams_keep_twice_the_bytes_in_flight() -> None:
    n = 1 << 26
    moved = 3 * n * 2  # swiglu: read gate and up, write the product
    assert memory_s(roofline.activation(A100, n, "swiglu", "fp16", access="scalar")) == pytest.approx(
        queued(moved, 2 * SCALAR_FP16_BW), rel=1e-12
    )
    # Vectorized: one 16-byte load per input in flight. An add of two tensors keeps 32 B per thread in flight.
    assert memory_s(roofline.elementwise(A100, n, inputs=2, dtype="fp16")) == pytest.approx(
        queued(3 * n * 2, 16 * SCALAR_FP16_BW), rel=1e-12
    )


def test_an_embedding_waits_for_its_token_id_before_each_row() -> None:
    tokens, hidden = 16384, 4096
    moved = 4 * tokens + 2 * 2 * tokens * hidden  # int32 ids, rows read and written in fp16
    kernels = roofline.embedding(A100, tokens, hidden, 128256, "fp16", access="scalar")
    assert memory_s(kernels) == pytest.approx(queued(moved, SCALAR_FP16_BW / 2), rel=1e-12)


def test_a_tiny_kernel_pays_one_memory_round_trip() -> None:
    assert memory_s(roofline.elementwise(A100, 1, dtype="fp16")) == pytest.approx(LATENCY, rel=1e-12)
    assert memory_s(roofline.embedding(A100, 1, 8, 10, "fp16")) == pytest.approx(2 * LATENCY, rel=1e-12)


def test_a_profile_without_latency_is_the_plain_roofline() -> None:
    plain = replace(A100, memory_latency_s=None)
    n = 1 << 20
    assert memory_s(roofline.elementwise(plain, n, dtype="fp16", access="scalar"), plain) == pytest.approx(
        2 * n * 2 / BW, rel=1e-12
    )


# --- PyTorch's vectorized layer norm (roofline.ops.LAYERNORM_BLOCK_THREADS), by hand on the A100 profile -----------
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


# --- XLA's measured ALU costs (shared/validation/xla, OpenXLA hlo_op_profiles_data.h) ------------------------------


def test_alu_costs_come_from_the_devices_generation_or_the_nearest_one() -> None:
    assert alu_cost("tanh", "bf16", "sm_80") == (504.0, "xla sm_80 tanh F32")
    assert alu_cost("tanh", "fp16", "sm_80") == (499.0, "xla sm_80 tanh F16")
    assert alu_cost("exp", "bf16", "sm_80") == (79.0, "xla sm_70 exp F32")  # A100 not measured: V100's row
    assert alu_cost("tanh", "bf16", "sm_89") == (504.0, "xla sm_80 tanh F32")  # Ada sits after Ampere
    assert alu_cost("sin", "bf16", None) == (958.0, "xla sm_90 sin F32")  # no CUDA architecture: H100's
    with pytest.raises(ValueError, match="unknown elementwise function"):
        alu_cost("softplus", "bf16", "sm_80")


def test_one_xla_tanh_turns_a_bf16_elementwise_op_compute_bound_on_an_a100() -> None:
    # Ridge of the achievable rates: 19.5e12 · 0.8 / (2039e9 · 0.9) = 8.50 FLOP/B; bf16 in and out is 4 B per
    # element, so the flip is at 34 FLOPs per element. tanh costs 504, an add 6 (V100's sm_70 row: XLA
    # measured no add on sm_80).
    n = 1 << 28
    tanh = roofline.single(
        roofline.elementwise(A100, n, functions=("tanh",), flops_per_element=0.0), A100, 19.5e12, 0.0
    )
    add = roofline.single(roofline.elementwise(A100, n, 2, 1, 0.0, functions=("add",)), A100, 19.5e12, 0.0)
    assert one(tanh.flops) == 504 * n and roofline.Bound(int(tanh.bound)).name == "compute"
    assert one(tanh.compute_s) == pytest.approx(504 * n / (19.5e12 * 0.8), rel=1e-12)
    assert one(add.flops) == 6 * n and roofline.Bound(int(add.bound)).name == "memory"
