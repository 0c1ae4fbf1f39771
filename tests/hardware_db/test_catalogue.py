"""The built-in catalogue: every slug the issue names, valid, with figures that match their sources.

Spot checks hold figures against shared/reference/HARDWARE_SOURCES.md, typed here by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hardware_db import CatalogueError, load_hardware, load_models
from hardware_db._loader import HARDWARE_DIR
from schemas.hardware import HardwareCreate, source_for
from schemas.models import ModelCreate

HARDWARE_SLUGS = {
    "v100-sxm2-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h200-sxm",
    "b200", "l4", "l40s", "rtx-4090", "mi250x", "mi300x", "mi325x", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
    "cpu-generic", "gb200", "rtx-pro-6000-server", "mi355x",
}  # fmt: skip
MODEL_SLUGS = {
    "gpt2", "seed-calculator", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
    "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-72b", "gemma-2-9b", "deepseek-v3", "gpt3-175b",
    "llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-r1",
    "llama-4-scout", "llama-4-maverick", "minimax-m2.5", "kimi-k2.5",
}  # fmt: skip


@pytest.fixture(scope="module")
def hardware() -> dict[str, HardwareCreate]:
    return {p.slug: p for p in load_hardware()}


@pytest.fixture(scope="module")
def models() -> dict[str, ModelCreate]:
    return {m.slug: m for m in load_models()}


def test_every_named_hardware_profile_is_there(hardware: dict[str, HardwareCreate]) -> None:
    assert set(hardware) >= HARDWARE_SLUGS


def test_every_named_model_is_there(models: dict[str, ModelCreate]) -> None:
    assert set(models) >= MODEL_SLUGS


def test_every_profile_cites_a_source_with_a_url_or_a_measurement(hardware: dict[str, HardwareCreate]) -> None:
    for profile in hardware.values():
        for source in profile.sources:
            assert source.url or source.title, profile.slug
        assert source_for("memory.device.bandwidth_bytes_per_s", profile.figure_sources), profile.slug


@pytest.mark.parametrize(
    ("slug", "dtype", "tflops"),
    [
        ("h100-sxm", "bf16", 989),  # §1: dense = sparse 1979 / 2
        ("h100-sxm", "fp8", 1979),
        ("a100-sxm-80gb", "bf16", 312),
        ("a100-sxm-40gb", "tf32", 156),
        ("h100-pcie", "bf16", 756),
        ("h200-sxm", "bf16", 989),
        ("b200", "bf16", 2250),
        ("gb200", "bf16", 2500),  # §1: GB200 per Blackwell GPU, dense
        ("gb200", "fp4", 10000),
        # Not in HARDWARE_SOURCES: the datasheet's FP4 4 PFLOPS with sparsity / 2, halved per wider type (its notes).
        ("rtx-pro-6000-server", "fp4", 2000),
        ("rtx-pro-6000-server", "bf16", 500),
        ("mi300x", "bf16", 1307.4),
        ("b200", "fp6", 4500),  # §1: "FP6 4500"
        # Not in HARDWARE_SOURCES: AMD's MI355X data sheet (profile notes), FLOPs per clock per CU × 256 × 2.4 GHz.
        ("mi355x", "bf16", 4096 * 256 * 2.4e9 / 1e12),  # 2 516.6 ("2.5 PF")
        ("mi355x", "fp8", 8192 * 256 * 2.4e9 / 1e12),  # 5 033.2
        ("mi355x", "fp6", 16384 * 256 * 2.4e9 / 1e12),  # 10 066.3 (MXFP6 at MXFP4's rate)
        ("mi355x", "fp4", 16384 * 256 * 2.4e9 / 1e12),
        ("mi355x", "fp32", 256 * 256 * 2.4e9 / 1e12),  # 157.3
        ("mi355x", "fp64", 128 * 256 * 2.4e9 / 1e12),  # 78.6
        ("tpu-v5e", "bf16", 197),
        ("tpu-v5p", "bf16", 459),
        ("tpu-v6e", "bf16", 918),
        ("tpu-v4", "bf16", 275),
    ],
)
def test_dense_matrix_peaks(hardware: dict[str, HardwareCreate], slug: str, dtype: str, tflops: float) -> None:
    peaks = {str(k): v for k, v in hardware[slug].compute.matrix_flops_per_s.items()}
    assert peaks[dtype] == pytest.approx(tflops * 1e12, rel=1e-3)


@pytest.mark.parametrize(
    ("slug", "gb_per_s", "units"),
    [
        ("v100-sxm2-32gb", 900, 80),
        ("a100-sxm-80gb", 2039, 108),  # datasheet 2039 GB/s chosen over the rounded 2.00 TB/s (§8.14)
        ("a100-sxm-40gb", 1555, 108),
        ("h100-sxm", 3350, 132),
        ("h200-sxm", 4800, 132),
        ("l40s", 864, 142),
        ("gb200", 8000, 148),  # §2: GB200 per GPU
        # aiconfigurator's system file for the card it measured, 512 bit × 28 Gbps (the datasheet's 1.6 TB/s is below
        # what that card sustains: decision 0044); 188 SMs from the datasheet's CUDA cores
        ("rtx-pro-6000-server", 1792, 188),
        ("rtx-4090", 1008, 128),
        ("mi300x", 5300, 304),
        ("mi325x", 6000, 304),
        ("mi355x", 8000, 256),  # AMD's MI355X data sheet: 8 TB/s HBM3E, 256 CUs (profile notes)
        ("tpu-v6e", 1638, 1),
    ],
)
def test_memory_bandwidth_and_compute_units(
    hardware: dict[str, HardwareCreate], slug: str, gb_per_s: float, units: int
) -> None:
    profile = hardware[slug]
    assert profile.memory.device.bandwidth_bytes_per_s == pytest.approx(gb_per_s * 1e9, rel=1e-3)
    assert profile.compute.units == units


def test_a100_has_no_fp8_and_v100_no_bf16(hardware: dict[str, HardwareCreate]) -> None:
    assert "fp8" not in {str(k) for k in hardware["a100-sxm-80gb"].compute.matrix_flops_per_s}
    assert "bf16" not in {str(k) for k in hardware["v100-sxm2-32gb"].compute.matrix_flops_per_s}


def test_mi355x_has_no_tf32_and_its_data_sheet_memory_fabric_and_power(hardware: dict[str, HardwareCreate]) -> None:
    mi355x = hardware["mi355x"]
    assert "tf32" not in {str(k) for k in mi355x.compute.matrix_flops_per_s}  # CDNA 4 has no XF32 matrix type
    assert mi355x.compute.architecture == "gfx950"  # validation/xla README: gfx950 is MI350/MI355X
    assert mi355x.memory.device.capacity_bytes == 288e9
    assert mi355x.memory.cache is not None and mi355x.memory.cache.capacity_bytes == 256e6  # Infinity Cache
    assert mi355x.memory.local is not None and mi355x.memory.local.capacity_bytes == 160 * 1024  # LDS per CU
    link = mi355x.interconnect.scale_up
    assert link is not None and link.links == 7
    # 153.6 GB/s per link read as bidirectional, as MI300X's 128 (§8.18): 76.8 per direction, 7 × 76.8 out of a GPU.
    assert link.link_bandwidth_per_direction_bytes_per_s == 153.6e9 / 2
    assert link.bandwidth_per_direction_bytes_per_s == pytest.approx(7 * 76.8e9)
    assert mi355x.power.tdp_w == 1400


@pytest.mark.parametrize(
    ("slug", "bf16", "fp16"),
    [
        ("h100-sxm", 133.8, 133.8),  # H100 whitepaper: non-Tensor FP16/BF16, twice FP32 66.9
        ("h200-sxm", 133.8, 133.8),  # the same GH100 compute (§1)
        ("h100-pcie", 102.4, 102.4),
        ("a100-sxm-80gb", 39, 78),  # A100 whitepaper Table 1: BF16 39, FP16 78 (non-Tensor)
        ("a100-sxm-40gb", 39, 78),
        ("a100-pcie-80gb", 39, 78),
        ("l40s", 91.6, 91.6),  # Ada: 16-bit non-tensor math at the FP32 rate
        ("rtx-4090", 82.6, 82.6),
    ],
)
def test_vector_rates_of_16_bit_types_are_the_whitepapers(
    hardware: dict[str, HardwareCreate], slug: str, bf16: float, fp16: float
) -> None:
    rates = {str(k): v for k, v in hardware[slug].compute.vector_flops_per_s.items()}
    assert rates["bf16"] == pytest.approx(bf16 * 1e12) and rates["fp16"] == pytest.approx(fp16 * 1e12)


def test_h100_nvlink_is_450_gb_per_s_per_direction(hardware: dict[str, HardwareCreate]) -> None:
    link = hardware["h100-sxm"].interconnect.scale_up
    assert link is not None
    assert link.bandwidth_per_direction_bytes_per_s == 450e9  # 900 GB/s bidirectional (§3)
    assert link.links == 18


def test_gb200_is_one_72_gpu_nvlink_domain_and_the_rtx_pro_6000_has_pcie_only(
    hardware: dict[str, HardwareCreate],
) -> None:
    gb200 = hardware["gb200"].interconnect
    assert gb200.scale_up is not None and gb200.scale_out is not None
    assert gb200.scale_up.domain_devices == 72  # §3: 72-GPU NVLink domain
    assert gb200.scale_up.bandwidth_per_direction_bytes_per_s == 900e9  # §3: 900 uni / 1800 bidi
    assert gb200.scale_out.bandwidth_per_direction_bytes_per_s == 3.6e12 / 72  # §3: 3.6 TB/s per 72-GPU rack
    assert hardware["gb200"].memory.device.capacity_bytes == 186e9  # §2: 186 GB (MLE-A), ⚠ vs 192 (§8.4)
    rtx = hardware["rtx-pro-6000-server"].interconnect
    assert rtx.scale_up is None and rtx.scale_out is None  # validation README: PCIe, no NVLink
    assert rtx.host is not None and rtx.host.bandwidth_per_direction_bytes_per_s == 63e9  # §3: Gen5 x16 ~63 uni
    for slug in ("gb200", "rtx-pro-6000-server"):
        assert source_for("memory.device.latency_s", hardware[slug].figure_sources) == "RL-ASSUME"
        assert any("RL-ASSUME" in note for note in hardware[slug].notes)


def test_tpu_torus_wraparound_rules(hardware: dict[str, HardwareCreate]) -> None:
    v5e = hardware["tpu-v5e"].interconnect.scale_up
    v5p = hardware["tpu-v5p"].interconnect.scale_up
    assert v5e is not None and v5p is not None
    assert v5e.topology == "torus" and v5e.wraparound_axis_multiple == 16  # only full 16-chip axes wrap
    assert v5p.topology == "torus" and v5p.wraparound_axis_multiple == 4  # whole 4x4x4 cubes via OCS


def test_h200_l2_follows_the_recorded_choice(hardware: dict[str, HardwareCreate]) -> None:
    cache = hardware["h200-sxm"].memory.cache
    assert cache is not None and cache.capacity_bytes == 60_000_000  # §8.1: device-reported 60 MB
    assert any("60 MB" in note or "L2" in note for note in hardware["h200-sxm"].notes)


@pytest.mark.parametrize(
    ("slug", "layers", "hidden", "heads", "kv_heads", "ffn"),
    [
        ("seed-calculator", 24, 768, 16, 16, 3072),
        ("gpt2", 12, 768, 12, 12, 3072),
        ("llama-2-70b", 80, 8192, 64, 8, 28672),
        ("llama-3-70b", 80, 8192, 64, 8, 28672),
        ("llama-3.1-405b", 126, 16384, 128, 8, 53248),
        ("gpt3-175b", 96, 12288, 96, 96, 49152),
    ],
)
def test_model_shapes(
    models: dict[str, ModelCreate], slug: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int
) -> None:
    m = models[slug]
    assert (m.layers, m.hidden_size, m.heads, m.kv_heads, m.ffn_size) == (layers, hidden, heads, kv_heads, ffn)


def test_moe_models(models: dict[str, ModelCreate]) -> None:
    mixtral, deepseek = models["mixtral-8x7b"].moe, models["deepseek-v3"].moe
    assert mixtral is not None and (mixtral.experts, mixtral.top_k, mixtral.shared_experts) == (8, 2, 0)
    assert deepseek is not None and (deepseek.experts, deepseek.top_k, deepseek.shared_experts) == (256, 8, 1)
    assert models["deepseek-v3"].mla is not None and models["deepseek-v3"].mla.kv_lora_rank == 512


def test_dense_parameter_count_matches_what_the_authors_report(models: dict[str, ModelCreate]) -> None:
    """12·L·d² + embeddings (Kaplan et al. 2020) for a standard MHA model: GPT-3 175B is 174.6 B by hand."""
    m = models["gpt3-175b"]
    params = 12 * m.layers * m.hidden_size**2 + m.vocab_size * m.hidden_size
    assert params == pytest.approx(174.56e9, rel=1e-3)
    assert m.reported_parameters == pytest.approx(params, rel=0.01)


def test_a_bad_file_is_reported_with_its_name_and_field(tmp_path: Path) -> None:
    directory = tmp_path
    text = (
        (HARDWARE_DIR / "h100-sxm.yaml")
        .read_text()
        .replace("bandwidth_bytes_per_s: 3.35e12", "bandwidth_bytes_per_s: -1")
    )
    (directory / "h100-sxm.yaml").write_text(text)
    with pytest.raises(CatalogueError, match=r"h100-sxm.yaml: .*\n  memory.device.bandwidth_bytes_per_s: "):
        load_hardware(directory)
    (directory / "h100-sxm.yaml").write_text(text.replace("slug: h100-sxm", "slug: other").replace(": -1", ": 3.35e12"))
    with pytest.raises(CatalogueError, match="does not match the file name"):
        load_hardware(directory)
    (directory / "h100-sxm.yaml").write_text("slug: a\nslug: b\n")
    with pytest.raises(Exception, match="duplicate key"):
        load_hardware(directory)


@pytest.mark.parametrize("slug", ["a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb"])
def test_a100_l2_bandwidth_is_the_whitepapers_bytes_per_clock_at_boost(
    hardware: dict[str, HardwareCreate], slug: str
) -> None:
    # NVIDIA A100 whitepaper: L2 read bandwidth 5120 bytes/clk; boost clock 1410 MHz (§2).
    cache = hardware[slug].memory.cache
    assert cache is not None and cache.bandwidth_bytes_per_s == pytest.approx(5120 * 1.41e9, rel=1e-12)
    assert source_for("memory.cache.bandwidth_bytes_per_s", hardware[slug].figure_sources) == "NV-A100-WP"
