"""Worked request examples shown in Swagger UI."""

from __future__ import annotations

from typing import Any

from fastapi.openapi.models import Example

_HARDWARE: dict[str, Any] = {
    "slug": "h100-sxm-5tbs",
    "name": "What-if: H100 SXM with 5 TB/s HBM",
    "vendor": "nvidia",
    "kind": "gpu",
    "compute": {
        "unit_name": "SM",
        "units": 132,
        "clock_hz": 1.83e9,
        "matrix_unit": {
            "name": "4th-generation Tensor Core",
            "per_compute_unit": 4,
            "tile_candidates": [{"m": 256, "n": 128}, {"m": 128, "n": 128}, {"m": 64, "n": 64}],
            "alignment_bytes": 16,
        },
        "matrix_flops_per_s": {"bf16": 989e12, "fp8": 1979e12},
        "vector_flops_per_s": {"fp32": 67e12},
    },
    "memory": {
        "device": {"name": "HBM3 (hypothetical)", "capacity_bytes": 80_000_000_000, "bandwidth_bytes_per_s": 5e12},
        "cache": {"name": "L2", "capacity_bytes": 50_000_000},
    },
    "overheads": {"kernel_launch_s": 5e-6},
    "efficiency": {"matmul": 0.81, "vector": 0.8, "memory": 0.9, "interconnect": 0.82},
    "sources": [
        {"key": "NV-H100", "title": "NVIDIA H100 datasheet", "url": "https://www.nvidia.com/en-us/data-center/h100/"},
        {"key": "WHAT-IF", "title": "Hypothetical bandwidth for a capacity-planning what-if"},
    ],
    "figure_sources": {
        "compute": "NV-H100",
        "memory": "NV-H100",
        "memory.device.bandwidth_bytes_per_s": "WHAT-IF",
        "overheads": "NV-H100",
        "efficiency": "NV-H100",
    },
}

HARDWARE_CREATE_EXAMPLE = {
    "what-if": Example(summary="An H100 with 5 TB/s of HBM bandwidth", value=_HARDWARE),
}
HARDWARE_PATCH_EXAMPLE = {
    "bandwidth": Example(
        summary="Change one figure and cite it",
        value={
            "memory": {"device": {"bandwidth_bytes_per_s": 6e12}},
            "sources": _HARDWARE["sources"],
        },
    ),
}

_MODEL: dict[str, Any] = {
    "slug": "my-7b",
    "name": "An in-house 7B with GQA",
    "family": "in-house",
    "layers": 32,
    "hidden_size": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn_size": 14336,
    "ffn_kind": "gated",
    "activation": "silu",
    "vocab_size": 32000,
    "tied_embeddings": False,
    "norm": "rmsnorm",
    "positional": "rotary",
    "max_context_tokens": 32768,
    "sources": [{"key": "INTERNAL", "title": "Our training config, run 2026-11-01"}],
}

MODEL_CREATE_EXAMPLE = {"gqa-7b": Example(summary="A 7B model with 8 KV heads", value=_MODEL)}
MODEL_PATCH_EXAMPLE = {"context": Example(summary="Longer context", value={"max_context_tokens": 65536})}
