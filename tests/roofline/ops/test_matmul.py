"""Matmul and its tile and split-K search (`roofline.ops.matmul`): properties that must hold for every shape, checked
with Hypothesis on the A100 profile (tests/roofline/profiles.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline
from tests.roofline.profiles import A100

A100_NO_LAUNCH = replace(A100, launch_s=0.0)  # a request's launch_overhead_s = 0
VECTOR_PEAK = A100.vector_peak("fp32")  # 16-bit elementwise math runs in fp32, as adapters.evaluate passes it
PROPERTIES = settings(max_examples=60, deadline=None)


# --- more work never takes less time -------------------------------------------------------------------------------


def matmul_time(hw: roofline.Hardware, m: int, n: int, k: int) -> float:
    est = roofline.single(roofline.matmul(hw, m, n, k), hw, hw.vector_peak("bf16"), hw.launch_s)
    return float(est.time_s)


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


# --- the tile and split-K search -----------------------------------------------------------------------------------


@PROPERTIES
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 40_000), st.integers(1, 40_000), st.integers(1, 40_000), st.integers(1, 8)),
        min_size=1,
        max_size=1200,  # more than one chunk of the tile search (`_SEARCH_CHUNK`, roofline/ops/_tile_search.py)
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


# --- a wave's first k-step and tile stores in a warm scope (decision 0046) -----------------------------------------


def test_a_warm_product_that_fits_in_l2_waits_for_its_first_k_step_and_stores_at_the_l2_rate() -> None:
    """A toy GPU: 100 units, one 128 × 128 tile each, 1 TB/s, L2 40 MB read at 100 × 1 GHz × 19 B = 1.9 TB/s
    (decision 0026), efficiencies 1. m = n = 1280, k = 32 in bf16 is one wave of 100 tiles; each waits for its first
    32-deep k-step of A and B, (128 + 128) · 32 · 2 B, and stores 128 · 128 · 2 B: 49 152 B × 100 = 4.9152 MB. Cold:
    4.9152 µs at device memory's rate. In a warm scope the product's 2 · (1280·32 + 32·1280 + 1280²) B = 3.44 MB fit
    the L2: 4.9152 MB / 1.9 TB/s = 2.587 µs. m = n = 5120 (16 waves; 2 · (2 · 5120·32 + 5120²) = 53 MB > 40 MB) keeps
    device memory's 16 × 4.9152 µs; so does a device whose L2 is no faster than its memory."""
    hw = roofline.Hardware(name="toy", units=100, matrix_flops_per_s={"bf16": 1e15}, vector_flops_per_s={"fp32": 1e13},
                           memory_bytes_per_s=1e12, memory_capacity_bytes=80e9, launch_s=0.0, eff_matmul=1.0,
                           eff_vector=1.0, eff_memory=1.0, cache_bytes=40e6, clock_hz=1e9,
                           architecture="sm_80")  # fmt: skip
    warm = replace(hw, warm_operands=True)

    def exposed(profile: roofline.Hardware, size: int) -> float:
        return float(roofline.matmul(profile, size, size, 32, tile=(128, 128))[-1].exposed_s)

    wave = (256 * 32 * 2 + 128 * 128 * 2) * 100
    assert exposed(hw, 1280) == pytest.approx(wave / 1e12, rel=1e-12)
    assert exposed(warm, 1280) == pytest.approx(wave / 1.9e12, rel=1e-12)
    assert exposed(replace(hw, warm_cache=True), 1280) == pytest.approx(wave / 1.9e12, rel=1e-12)
    assert exposed(warm, 5120) == pytest.approx(16 * wave / 1e12, rel=1e-12)
    assert exposed(replace(warm, memory_bytes_per_s=2e12), 1280) == pytest.approx(wave / 2e12, rel=1e-12)
    many = roofline.matmul(warm, np.array([1280.0, 5120.0]), np.array([1280.0, 5120.0]), 32, tile=(128, 128))
    assert np.asarray(many[-1].exposed_s) == pytest.approx([wave / 1.9e12, 16 * wave / 1e12], rel=1e-12)
