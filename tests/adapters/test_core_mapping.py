"""The adapters' mapping from catalogue profiles and model configs to the core's types (`adapters.to_core`,
`adapters.device_topology`, `adapters.transformer`).

The core's own tests build `roofline.Hardware`, its fabrics and `roofline.Transformer` directly
(tests/roofline/profiles.py, tests/roofline/models.py); here they are held equal to what the adapters make of the
catalogue, so that the core's hand-worked numbers are the catalogue's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline
from adapters import InvalidField, device_topology, to_core, topologies, transformer
from hardware_db import load_hardware, load_models
from schemas.estimates import EstimateContext, Options
from schemas.inference import AttentionKind, AttentionOverride
from tests.roofline import models, profiles

HARDWARE = {h.slug: h for h in load_hardware()}
MODELS = {m.slug: m for m in load_models()}


def core(slug: str, **options: float) -> roofline.Hardware:
    return to_core(HARDWARE[slug], EstimateContext(hardware=slug, options=Options(**options)))


@pytest.mark.parametrize("slug", sorted(profiles.HARDWARE))
def test_the_core_tests_devices_are_the_catalogues(slug: str) -> None:
    assert core(slug) == profiles.HARDWARE[slug]
    service_topology = topologies(HARDWARE[slug])
    assert service_topology is not None
    for devices in (2, 4, 8, 16):
        try:
            expected = device_topology(HARDWARE[slug], devices)
        except ValueError as err:
            with pytest.raises(ValueError, match=str(err)):
                profiles.topologies(slug)(devices)
            continue
        assert profiles.topologies(slug)(devices) == expected == service_topology(devices)


def test_request_options_replace_the_profiles_figures() -> None:
    a100 = profiles.A100
    assert core("a100-sxm-80gb", launch_overhead_s=0) == replace(a100, launch_s=0.0)
    assert core("a100-sxm-80gb", matmul_efficiency=0.5, memory_efficiency=1.0, launch_overhead_s=5e-6) == replace(
        a100, eff_matmul=0.5, eff_memory=1.0, launch_s=5e-6
    )


@pytest.mark.parametrize("slug", sorted(models.MODELS))
def test_the_core_tests_models_are_the_catalogues(slug: str) -> None:
    assert transformer(MODELS[slug], None) == models.MODELS[slug]


def test_the_service_maps_the_l2_bandwidth_of_the_profile() -> None:
    # L2: 5120 B/clk × 1.41 GHz = 7.2192e12 B/s (A100 whitepaper).
    assert core("a100-sxm-80gb").cache_bandwidth_bytes_per_s == pytest.approx(5120 * 1.41e9, rel=1e-12)


def test_a_sliding_window_over_every_layer_maps_to_window_layers() -> None:
    spec = MODELS["mistral-7b"]
    model = transformer(spec, None)
    assert spec.sliding_window_tokens == 4096 and model.window == 4096 and model.window_layers == spec.layers


def test_latent_attention_has_no_mha_mqa_or_gqa_what_if() -> None:
    with pytest.raises(InvalidField, match="multi-head latent attention"):
        transformer(MODELS["deepseek-v3"], AttentionOverride(kind=AttentionKind.mqa))
