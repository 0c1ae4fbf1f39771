"""Leave one device out (`bench.loo`): each rule that replaces a constant chosen from data, on hand-made facts and on
the A100's own rows (where the shipped constants were read from: bench/validate.py's SCOPES and the profiles'
650 ns latency)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pytest

import roofline
from bench import loo, validate
from hardware_db import load_hardware
from measured.datasets import Group, Part
from schemas.ops import Matmul
from tests.bench.conftest import group


def _facts() -> loo.Facts:
    f = loo.Facts()
    f.gemm_min_s = {"a": 1e-6, "b": 2e-6, "c": 4e-6}
    f.context_min_s = {"a": 10e-6, "b": 12e-6, "c": 20e-6}
    f.generation_min_s = {"a": 7e-6, "b": 9e-6, "c": 11e-6}
    f.vidur_shortest_s = {"a": 2e-6, "x": 1e-6}
    f.latency_s = {"a": 600e-9, "x": 700e-9}
    f.llmcompass_min_s = {"a": {"llmcompass": 13e-6, "llmcompass-layernorm": 52e-6, "llmcompass-gelu": 47e-6}}
    f.stream_fraction = {"a": 0.80, "b": 0.90, "c": 0.95}
    f.fp4_step_fraction = {"b": 0.70, "c": 0.80}
    f.clock_hz = {"a": 1e9, "b": 2e9, "c": 1.5e9}
    return f


def test_each_constant_is_the_median_over_the_training_devices() -> None:
    """Without c: GEMM floor median(1, 2) = 1.5 µs; the plateaus in cycles at each device's clock (a 1 GHz, b 2 GHz):
    context median(10 000, 24 000) = 17 000, generation median(7 000, 18 000) = 12 500; vidur and latency over a and
    x. On a 1.5 GHz device those plateaus are 11.33 and 8.33 µs."""
    c = loo.derive(_facts(), {"a", "b", "x"})
    assert c.kernel_floor_s == pytest.approx(1.5e-6)
    assert c.context_plateau_cycles == pytest.approx(17_000)
    assert c.generation_plateau_cycles == pytest.approx(12_500)
    scopes = validate.scopes_of(c)
    seconds = np.zeros(1)
    assert scopes["aiconfigurator-context"].measured(seconds + 2 * 1.5e-6, 1.5e9)[0] == pytest.approx(17e3 / 1.5e9)
    assert scopes["aiconfigurator-generation"].measured(seconds + 1.5e-6, 1.5e9)[0] == pytest.approx(12.5e3 / 1.5e9)
    assert c.vidur_launch_s == pytest.approx(1.5e-6)
    assert c.memory_latency_s == pytest.approx(650e-9)
    assert c.llmcompass_call_s == pytest.approx(13e-6)
    assert c.sources["kernel_floor_s"] == "a, b"
    assert c.matmul_stream_efficiency == pytest.approx(0.85)  # median(0.80, 0.90)
    assert c.block_scaled_step_latency == pytest.approx(0.70)  # b alone has NVFP4 rows
    assert c.sources["block_scaled_step_latency"] == "b"


def test_a_constant_whose_only_device_is_held_out_has_no_value() -> None:
    """Without a, nothing has LLMCompass rows: no fixed cost (the evaluation falls back to the profile's)."""
    c = loo.derive(_facts(), {"b", "c", "x"})
    assert c.llmcompass_call_s is None and c.llmcompass_gelu_call_s is None
    assert c.sources["llmcompass_call_s"] == "none"
    assert c.vidur_launch_s == pytest.approx(1e-6) and c.memory_latency_s == pytest.approx(700e-9)
    # Nothing but x: the stream fraction and the fp4 wait fall back to the shipped ones.
    bare = replace(
        _facts(), gemm_min_s={"x": 1e-6}, context_min_s={"x": 1e-5}, generation_min_s={"x": 1e-5}, clock_hz={"x": 1e9}
    )
    only_x = loo.derive(bare, {"x"})
    assert only_x.matmul_stream_efficiency == roofline.MATMUL_STREAM_EFFICIENCY
    assert only_x.block_scaled_step_latency == roofline.BLOCK_SCALED_STEP_LATENCY
    scopes = validate.scopes_of(c)
    assert scopes["llmcompass-gelu"].launch_s == 5e-6  # the A100 profile's kernel_launch_s (seed 004's 5 µs)
    assert scopes["llmcompass-layernorm"].floor_s == 0.0
    with pytest.raises(ValueError, match="kernel_floor_s"):
        loo.derive(_facts(), {"x"})


@dataclass
class _Scored:
    source: str
    family: str
    device: str
    measured_s: np.ndarray
    predicted_s: np.ndarray


def test_each_norm_is_the_candidate_with_the_least_error_on_the_training_rows() -> None:
    """A stand-in evaluation whose GEMM error is |overlap − 4| / 10 and streaming error |queueing − 1.5| / 10: the
    rule picks 4 and 1.5, the first of equals."""

    def evaluate(groups: Sequence[Group], c: loo.Constants) -> list[_Scored]:
        one = np.ones(3)
        return [
            _Scored("s", "gemm", "a", one, one * (1 + abs(c.overlap_norm - 4.0) / 10)),
            _Scored("s", "rmsnorm", "a", one, one * (1 - abs(c.memory_queueing_norm - 1.5) / 10)),
            _Scored("s", "attention-generation", "a", one, one * 3.0),
        ]

    base = loo.derive(_facts(), {"a", "b"})
    chosen = loo.choose_norms([], base, evaluate)
    assert (chosen.overlap_norm, chosen.memory_queueing_norm) == (4.0, 1.5)


@pytest.mark.slow  # every measured table parsed
@group("ops")
def test_the_rules_on_the_a100_rows_give_the_shipped_constants() -> None:
    """bench/validate.py's scopes (2.5, 13.3, 10.4, 2, 13.1, 52, 47 µs, rounded there; the plateaus as cycles at the
    A100 profile's 1 410 MHz) and the 650 ns latency (rounded from ~0.68 TB/s in the profile's note) from the A100's
    own rows."""
    a100 = [g for g in validate.load() if g.device == validate.HARDWARE]
    c = loo.derive(loo.facts(a100), {validate.HARDWARE})
    s = loo.SHIPPED
    assert next(h for h in load_hardware() if h.slug == validate.HARDWARE).compute.clock_hz == loo.A100_CLOCK_HZ
    for name in ("kernel_floor_s", "context_plateau_cycles", "generation_plateau_cycles", "vidur_launch_s"):
        assert getattr(c, name) == pytest.approx(getattr(s, name), rel=0.01), name
    for name in ("llmcompass_call_s", "llmcompass_layernorm_floor_s", "llmcompass_gelu_call_s"):
        assert getattr(c, name) == pytest.approx(getattr(s, name), rel=0.01), name
    assert c.memory_latency_s == pytest.approx(s.memory_latency_s, rel=0.03)


def test_the_shipped_constants_rebuild_the_shipped_scopes() -> None:
    assert validate.scopes_of(replace(loo.SHIPPED)) == validate.SCOPES


def test_the_narrow_efficiencies_are_medians_over_the_training_devices_and_a_missing_key_keeps_its_value() -> None:
    f = _facts()
    f.narrow_ratio = {"fp8": {"a": 0.7, "b": 0.8, "c": 0.9}, "fp8_block": {"c": 0.5}}
    c = dict(loo.derive(f, {"a", "b", "x"}).narrow_matmul_efficiency)
    assert c["fp8"] == pytest.approx(0.75) and c["fp8_block"] == roofline.NARROW_MATMUL_EFFICIENCY["fp8_block"]
    assert "fp4" not in c  # an fp4 product's rate is its k-tiles' wait (decision 0042), not a factor


def test_a_narrow_ratio_is_the_achieved_share_of_peak_against_bf16_on_the_same_shapes() -> None:
    """Two shapes of ≥ 2e11 FLOPs on B200 (bf16 2 250, fp8 4 500 TFLOP/s): bf16 100 and 200 µs, the fp8 products 62.5
    and 100 µs, so fp8 reaches (100 / 62.5) / 2 = 0.8 and (200 / 100) / 2 = 1.0 of bf16's share; the median is 0.9.
    Each measured fp8 call also holds its quantise kernels, which the rule takes off at their modelled time (the
    call's less the product's alone, `roofline.matmul`). A shape only one table holds, or one under 2e11 FLOPs, is
    not counted."""
    m, n, k = np.array([4096.0, 8192.0, 64.0]), np.array([8192.0, 8192.0, 64.0]), np.array([8192.0, 8192.0, 64.0])
    shapes = {"m": m, "n": n, "k": k}
    spec = next(h for h in load_hardware() if h.slug == "b200")
    hw = validate.hardware(loo.SHIPPED.kernel_floor_s, spec)
    vector = hw.vector_peak("fp32")
    call = roofline.single(roofline.matmul(hw, m, n, k, quantization="fp8_tensor"), hw, vector, hw.launch_s)
    alone = roofline.matmul(hw, m, n, k, quantization="fp8_tensor", input_quantized=True)
    quantise = np.asarray(call.time_s) - np.asarray(roofline.single(alone, hw, vector, hw.launch_s).time_s)
    bf16 = Group("aiconfigurator", "gemm", [Part(Matmul(m=1, n=1, k=1), shapes)],
                 np.array([100e-6, 200e-6, 2e-6]), ["", "", ""], "aiconfigurator", "b200")  # fmt: skip
    fp8_op = Matmul(m=1, n=1, k=1, quantization="fp8_tensor")
    measured = np.array([62.5e-6, 100e-6, 1e-6]) + quantise
    fp8 = Group("aiconfigurator", "gemm-fp8", [Part(fp8_op, shapes)], measured, ["", "", ""], "aiconfigurator", "b200")
    assert loo.narrow_ratios([bf16, fp8]) == {"fp8": {"b200": pytest.approx(0.9)}}
    assert float(quantise[0]) > 5e-6  # a 4096 × 8192 input: its amax and quantise passes are not negligible


@pytest.mark.slow  # every measured table parsed
@group("ops")
def test_the_rule_on_every_device_with_quantised_rows_gives_the_shipped_narrow_efficiencies() -> None:
    groups = validate.load()
    derived = dict(loo.derive(loo.facts(groups), {g.device for g in groups}).narrow_matmul_efficiency)
    assert derived == dict(roofline.NARROW_MATMUL_EFFICIENCY)


@pytest.mark.slow  # every measured table parsed
@group("ops")
def test_the_xla_floor_is_the_median_of_the_xla_devices_shortest_matmuls() -> None:
    """B200's shortest XLA matmul is 4.85 µs, gfx950's 3.44 µs (validation/xla): shipped 4.14 µs, their median; each
    device held out gets the other's; without an XLA device the scope falls back to the GEMM floor."""
    groups = validate.load()
    f = loo.facts(groups)
    assert f.xla_min_s == {"b200": pytest.approx(4.849e-6), "mi355x": pytest.approx(3.44e-6)}
    assert loo.derive(f, {g.device for g in groups}).xla_floor_s == pytest.approx(loo.SHIPPED.xla_floor_s, rel=0.01)
    assert loo.derive(f, {"a100-sxm-80gb", "mi355x"}).xla_floor_s == pytest.approx(3.44e-6)
    no_xla = loo.derive(f, {"a100-sxm-80gb"})
    assert no_xla.xla_floor_s is None and validate.scopes_of(no_xla)["xla"].launch_s == no_xla.kernel_floor_s
