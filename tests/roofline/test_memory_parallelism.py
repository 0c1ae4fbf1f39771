"""Little's-law bandwidth for kernels with few bytes in flight, XLA's per-element ALU costs, and the backward pass
of elementwise chains with intermediates stored or recomputed. Numbers by hand from the A100 catalogue profile:
108 SMs × 2048 threads, 650 ns device-memory latency (RL-ASSUME), 2039e9 B/s × 0.90, 19.5e12 FP32 FLOP/s × 0.80.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline as rl
from adapters import to_core
from hardware_db import load_yaml
from hardware_db._loader import HARDWARE_DIR
from roofline._alu import alu_cost
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareCreate

SPEC = HardwareCreate.model_validate(load_yaml(HARDWARE_DIR / "a100-sxm-80gb.yaml"))
A100 = to_core(SPEC, EstimateContext(hardware=SPEC.slug))
BW = 2039e9 * 0.90
LATENCY = 650e-9
SCALAR_FP16_BW = 108 * 2048 * 2 / LATENCY  # 680.6 GB/s: one 2-byte load per resident thread in flight


def queued(moved: float, in_flight_bw: float) -> float:
    """Seconds for `moved` bytes under both limits, combined as `roofline._kernels.MEMORY_QUEUEING_NORM` = 2 says:
    moved · √(1/BW² + 1/in_flight_bw²)."""
    return moved * ((1 / BW) ** 2 + (1 / in_flight_bw) ** 2) ** 0.5


def one(x: object) -> float:
    return float(np.asarray(x))


def memory_s(kernels: list[rl.Kernel], hw: rl.Hardware = A100) -> float:
    return one(rl.single(kernels, hw, hw.vector_peak("fp16"), 0.0).memory_s)


def test_the_profile_carries_the_latency_and_threads() -> None:
    assert A100.memory_latency_s == LATENCY and A100.threads_per_unit == 2048 and A100.architecture == "sm_80"
    assert pytest.approx(680.6e9, rel=1e-4) == SCALAR_FP16_BW


def test_a_scalar_rms_norm_runs_at_the_bandwidth_its_loads_in_flight_allow() -> None:
    rows = cols = 4096
    moved = 2 * rows * cols * 2 + cols * 2  # read x and write y in fp16, plus the scale vector
    scalar = rl.layernorm(A100, rows, cols, "fp16", rms=True, access="scalar")
    vectorized = rl.layernorm(A100, rows, cols, "fp16", rms=True)
    # 0.68 TB/s in flight against 1.84 TB/s of bandwidth: 0.64 TB/s.
    assert memory_s(scalar) == pytest.approx(queued(moved, SCALAR_FP16_BW), rel=1e-12)
    assert moved / memory_s(scalar) == pytest.approx(638.1e9, rel=1e-3)
    # 16-byte loads: 108 · 2048 · 16 B / 650 ns = 5.4 TB/s in flight, three times what HBM gives: 5 % below it.
    assert memory_s(vectorized) == pytest.approx(queued(moved, 8 * SCALAR_FP16_BW), rel=1e-12)
    assert moved / memory_s(vectorized) == pytest.approx(1.739e12, rel=1e-3)


def test_two_input_streams_keep_twice_the_bytes_in_flight() -> None:
    n = 1 << 26
    moved = 3 * n * 2  # swiglu: read gate and up, write the product
    assert memory_s(rl.activation(A100, n, "swiglu", "fp16", access="scalar")) == pytest.approx(
        queued(moved, 2 * SCALAR_FP16_BW), rel=1e-12
    )
    # Vectorized: one 16-byte load per input in flight. An add of two tensors keeps 32 B per thread in flight.
    assert memory_s(rl.elementwise(A100, n, inputs=2, dtype="fp16")) == pytest.approx(
        queued(3 * n * 2, 16 * SCALAR_FP16_BW), rel=1e-12
    )


def test_an_embedding_waits_for_its_token_id_before_each_row() -> None:
    tokens, hidden = 16384, 4096
    moved = 4 * tokens + 2 * 2 * tokens * hidden  # int32 ids, rows read and written in fp16
    kernels = rl.embedding(A100, tokens, hidden, 128256, "fp16", access="scalar")
    assert memory_s(kernels) == pytest.approx(queued(moved, SCALAR_FP16_BW / 2), rel=1e-12)


def test_a_tiny_kernel_pays_one_memory_round_trip() -> None:
    assert memory_s(rl.elementwise(A100, 1, dtype="fp16")) == pytest.approx(LATENCY, rel=1e-12)
    assert memory_s(rl.embedding(A100, 1, 8, 10, "fp16")) == pytest.approx(2 * LATENCY, rel=1e-12)


def test_a_profile_without_latency_is_the_plain_roofline() -> None:
    plain = replace(A100, memory_latency_s=None)
    n = 1 << 20
    assert memory_s(rl.elementwise(plain, n, dtype="fp16", access="scalar"), plain) == pytest.approx(
        2 * n * 2 / BW, rel=1e-12
    )


# --- XLA's measured ALU costs (shared/validation/xla, OpenXLA hlo_op_profiles_data.h) -------------------------------


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
    tanh = rl.single(rl.elementwise(A100, n, functions=("tanh",), flops_per_element=0.0), A100, 19.5e12, 0.0)
    add = rl.single(rl.elementwise(A100, n, 2, 1, 0.0, functions=("add",)), A100, 19.5e12, 0.0)
    assert one(tanh.flops) == 504 * n and rl.Bound(int(tanh.bound)).name == "compute"
    assert one(tanh.compute_s) == pytest.approx(504 * n / (19.5e12 * 0.8), rel=1e-12)
    assert one(add.flops) == 6 * n and rl.Bound(int(add.bound)).name == "memory"


# --- recomputation (seed 002: three stacked sigmoids) ---------------------------------------------------------------


def sigmoids(hw: rl.Hardware, n: int) -> list[list[rl.Kernel]]:
    return [rl.activation(hw, n, "sigmoid", "bf16") for _ in range(3)]


@pytest.mark.parametrize("n", [1 << 20, 1 << 24])
def test_recomputing_a_chain_moves_five_eighths_of_storing_it(n: int) -> None:
    store = rl.chain(sigmoids(A100, n), A100, True, 19.5e12, 0.0, backward="store")
    recompute = rl.chain(sigmoids(A100, n), A100, True, 19.5e12, 0.0, backward="recompute")
    # Stored: forward reads x, writes s1, s2, out (4); backward reads dout, s1, s2, writes dx (4): 8 tensors.
    # Recomputed: forward reads x, writes out (2); backward reads dout and x, writes dx (3): 5 tensors.
    assert one(store.bytes) == 8 * 2 * n and one(recompute.bytes) == 5 * 2 * n
    # FLOPs: 3 sigmoids of 3 FLOPs forward; backward twice that, plus the forward again when recomputing.
    assert one(store.flops) == 9 * n + 18 * n and one(recompute.flops) == 9 * n + 27 * n
    assert one(recompute.time_s) < one(store.time_s)  # memory-bound: fewer bytes win


def test_an_unfused_chain_stores_every_op_and_cannot_recompute() -> None:
    n = 1 << 20
    unfused = rl.chain(sigmoids(A100, n), A100, False, 19.5e12, 0.0, backward="store")
    # Forward: 3 kernels of read + write (6); backward: 3 kernels reading a gradient and a saved input, writing a
    # gradient (9): 15 tensors.
    assert one(unfused.bytes) == 15 * 2 * n
    with pytest.raises(ValueError, match="recompute needs a fused chain"):
        rl.chain(sigmoids(A100, n), A100, False, 19.5e12, 0.0, backward="recompute")
    with pytest.raises(ValueError, match="elementwise ops"):
        rl.chain([rl.matmul(A100, 64, 64, 64)], A100, True, 19.5e12, 0.0, backward="store")
