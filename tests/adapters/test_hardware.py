"""A hardware profile as the core sees it: every figure of the A100 SXM4 80GB's YAML in its place, the request's
options over the profile's defaults, and the per-kernel fixed cost of a timing scope."""

from __future__ import annotations

import pytest

import adapters
from schemas.benchmarks import TimingScope
from schemas.estimates import EstimateContext, Options
from schemas.hardware import HardwareCreate
from tests.adapters.conftest import A100, HARDWARE


def test_the_a100_profile_maps_figure_by_figure() -> None:
    hw = adapters.to_core(A100, EstimateContext(hardware=A100.slug))
    assert (hw.name, hw.units, hw.threads_per_unit, hw.architecture) == ("NVIDIA A100 SXM4 80GB", 108, 2048, "sm_80")
    assert hw.matrix_flops_per_s["bf16"] == 312e12 and "fp8" not in hw.matrix_flops_per_s  # no fp8 on Ampere
    assert hw.vector_flops_per_s["fp32"] == 19.5e12
    assert (hw.memory_bytes_per_s, hw.memory_capacity_bytes, hw.memory_latency_s) == (2039e9, 80e9, 650e-9)
    assert (hw.cache_bytes, hw.cache_bandwidth_bytes_per_s, hw.local_bytes_per_unit) == (41943040, 7.2192e12, 167936)
    assert hw.tiles == ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
    assert (hw.concurrent_tiles_per_unit, hw.alignment_bytes) == (1, 16)
    assert (hw.launch_s, hw.eff_matmul, hw.eff_vector, hw.eff_memory) == (5e-6, 0.87, 0.80, 0.90)


def test_options_replace_the_profiles_defaults_and_a_zero_launch_is_kept() -> None:
    options = Options(matmul_efficiency=0.5, memory_efficiency=1.0, launch_overhead_s=0.0)
    hw = adapters.to_core(A100, EstimateContext(hardware=A100.slug, options=options))
    assert (hw.eff_matmul, hw.eff_vector, hw.eff_memory, hw.launch_s) == (0.5, 0.80, 1.0, 0.0)


def test_a_profile_without_a_matrix_unit_gets_one_64_by_64_tile() -> None:
    doc = A100.model_dump(mode="json", exclude_none=True)
    del doc["compute"]["matrix_unit"]
    doc["figure_sources"] = {k: v for k, v in doc["figure_sources"].items() if "matrix_unit" not in k}
    spec = HardwareCreate.model_validate(doc)
    hw = adapters.to_core(spec, EstimateContext(hardware=spec.slug))
    assert (hw.tiles, hw.concurrent_tiles_per_unit, hw.alignment_bytes) == (((64, 64),), 1, 16)


def test_the_core_profile_is_built_once_per_profile_object_and_options() -> None:
    ctx = EstimateContext(hardware=A100.slug)
    first = adapters.to_core(A100, ctx)
    assert adapters.to_core(A100, EstimateContext(hardware=A100.slug)) is first
    assert adapters.to_core(A100, EstimateContext(hardware=A100.slug, options=Options(launch_overhead_s=1e-6))) != first
    # Another profile object is another entry, even with the same figures: the cache keys on identity.
    copy = HardwareCreate.model_validate(A100.model_dump(mode="json", exclude_none=True))
    assert adapters.to_core(copy, ctx) is not first
    assert adapters.to_core(copy, ctx) == first


@pytest.mark.parametrize(
    ("scope", "launch_s"),
    [(TimingScope.wall_clock, 5e-6), (TimingScope.kernel, 2.5e-6), (TimingScope.graph_replay, 2.5e-6)],
)
def test_a_timing_scope_sets_the_fixed_cost_per_kernel(scope: TimingScope, launch_s: float) -> None:
    # Kernel time has no host launch in it: the A100's shortest kernel, 2.5 µs, instead of its 5 µs launch.
    assert adapters.scope_launch_s(A100, scope) == launch_s
    assert adapters.scoped_core(A100, A100.slug, scope).launch_s == launch_s


def test_the_kernel_floor_never_raises_a_profiles_own_launch_cost() -> None:
    fast = min(HARDWARE.values(), key=lambda h: h.overheads.kernel_launch_s)
    assert fast.overheads.kernel_launch_s < adapters.KERNEL_FLOOR_S
    assert adapters.scope_launch_s(fast, TimingScope.kernel) == fast.overheads.kernel_launch_s
