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

ESTIMATE_OP_EXAMPLES = {
    "wave-cliff": Example(
        summary="Seed 002: a 1793³ bf16 matmul on an A100 with 256×128 tiles (120 tiles, 2 waves)",
        value={
            "hardware": "a100-sxm-80gb",
            "op": {"kind": "matmul", "m": 1793, "n": 1793, "k": 1793, "tile": [256, 128]},
        },
    ),
    "fused-relu": Example(
        summary="Seed 000: relu(A@B) fused into the matmul",
        value={
            "hardware": "tpu-v4",
            "op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "epilogue": ["relu"], "fuse_epilogue": True},
        },
    ),
    "flash-attention": Example(
        summary="Causal flash attention, Llama-3-8B shapes, 8k prefill",
        value={
            "hardware": "h100-sxm",
            "op": {
                "kind": "attention",
                "batch": 1,
                "heads": 32,
                "kv_heads": 8,
                "head_dim": 128,
                "q_len": 8192,
                "kv_len": 8192,
                "causal": True,
                "implementation": "flash",
            },
        },
    ),
    "nvfp4-linear": Example(
        summary="A TensorRT-LLM NVFP4 linear layer on a B200: the bf16 input quantised, then the fp4 product",
        value={
            "hardware": "b200",
            "op": {"kind": "matmul", "m": 2048, "n": 8192, "k": 8192, "quantization": "nvfp4"},
        },
    ),
    "moe-layer": Example(
        summary="DeepSeek-V3's experts on one of 8 B200s (expert parallelism), 4096 tokens, fp8 block scales",
        value={
            "hardware": "b200",
            "op": {
                "kind": "moe",
                "tokens": 4096,
                "hidden": 7168,
                "inter": 2048,
                "top_k": 8,
                "experts": 256,
                "expert": 8,
                "quantization": "fp8_block",
                "routing": "uniform",
            },
        },
    ),
    "warm-cache-benchmark": Example(
        summary="Decode attention on an L40S as a microbenchmark replaying it sees it: its 67 MB cache warm in L2",
        value={
            "hardware": "l40s",
            "op": {
                "kind": "attention",
                "batch": 8,
                "heads": 32,
                "kv_heads": 8,
                "head_dim": 128,
                "q_len": 1,
                "kv_len": 2048,
            },
            "options": {"cache": "warm", "launch_overhead_s": 2.5e-6},
        },
    ),
    "what-if": Example(
        summary="An H100 with 5 TB/s: a decode-shaped GEMV",
        value={
            "hardware": "h100-sxm",
            "hardware_patch": {"memory": {"device": {"bandwidth_bytes_per_s": 5e12}}},
            "op": {"kind": "matmul", "m": 1, "n": 8192, "k": 8192},
        },
    ),
}
ESTIMATE_OPS_EXAMPLES = {
    "sweep": Example(
        summary="A grid of bf16 matmuls (m × n from 1024 to 4096, k = 4096) on an A100",
        value={
            "hardware": "a100-sxm-80gb",
            "sweep": {
                "op": {"kind": "matmul", "m": 1, "n": 1, "k": 1},
                "vary": {"m": [1024, 2048, 4096], "n": [1024, 2048, 4096], "k": [4096]},
            },
        },
    ),
    "list": Example(
        summary="sin²x + cos²x: five kernels, or one",
        value={
            "hardware": "h100-sxm",
            "ops": [
                {
                    "kind": "chain",
                    "fused": False,
                    "ops": [
                        {"kind": "elementwise", "elements": 16777216, "transcendentals_per_element": 1},
                        {"kind": "elementwise", "elements": 16777216},
                        {"kind": "elementwise", "elements": 16777216, "transcendentals_per_element": 1},
                        {"kind": "elementwise", "elements": 16777216},
                        {"kind": "elementwise", "elements": 16777216, "inputs": 2, "chained_inputs": 2},
                    ],
                },
            ],
        },
    ),
}

BENCHMARK_RUN_EXAMPLES = {
    "gemms": Example(
        summary="Two bf16 GEMMs timed on an A100 (CUDA-graph replays)",
        value={
            "hardware": "NVIDIA A100-SXM4-80GB",
            "host": "gpu-node-17",
            "software": {"driver": "550.54.15", "cuda": "12.4", "jax": "0.4.35", "triton": "3.1.0"},
            "timing_scope": "graph_replay",
            "results": [
                {
                    "op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"},
                    "median_s": 5.43e-4,
                    "p10_s": 5.40e-4,
                    "p90_s": 5.51e-4,
                    "repeats": 100,
                },
                {
                    "op": {"kind": "matmul", "m": 1793, "n": 1793, "k": 1793, "dtype": "bf16"},
                    "median_s": 7.9e-5,
                    "p10_s": 7.8e-5,
                    "p90_s": 8.1e-5,
                    "repeats": 100,
                },
            ],
        },
    ),
    "jax-host-clock": Example(
        summary="A JAX product on an H200, timed on the host clock, with the host's measured cost per call",
        value={
            "hardware": "NVIDIA H200",
            "host": "gpu-node-18",
            "software": {"jax": "0.11.2", "jaxlib": "0.11.2", "cuda": "13.0"},
            "timing_scope": "wall_clock",
            "host_overhead_s": 7.518e-5,
            "results": [
                {
                    "op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"},
                    "median_s": 4.395e-4,
                    "p10_s": 3.958e-4,
                    "p90_s": 5.024e-4,
                    "repeats": 1000,
                },
            ],
        },
    ),
}

COLLECTIVE_EXAMPLES = {
    "tp-all-reduce": Example(
        summary="Tensor-parallel all-reduce of 16 MB on 8 A100s (NVSwitch)",
        value={"op": "all_reduce", "bytes": 16e6, "hardware": "a100-sxm-80gb", "devices": 8},
    ),
    "two-nodes": Example(
        summary="All-reduce of 256 MB on 16 H100s: NVLink inside each node, InfiniBand across",
        value={"op": "all_reduce", "bytes": 256e6, "hardware": "h100-sxm", "devices": 16},
    ),
    "torus-axis": Example(
        summary="All-gather of 1 GB over one wraparound axis of a TPU v5e 16x16 torus",
        value={
            "op": "all_gather",
            "bytes": 1e9,
            "topology": {
                "kind": "torus",
                "axes": [{"size": 16, "wraparound": True}, {"size": 16, "wraparound": True}],
                "collective_axes": [0],
            },
            "link_bandwidth_bytes_per_s": 50e9,
            "hop_latency_s": 1e-6,
        },
    ),
    "hierarchical": Example(
        summary="Explicit two-level hierarchy: 8 GPUs per node on 300 GB/s, 4 nodes on 25 GB/s per GPU",
        value={
            "op": "all_reduce",
            "bytes": 1e9,
            "algorithm": "hierarchical",
            "topology": {
                "kind": "hierarchical",
                "inner": {"kind": "switch", "devices": 8, "link_bandwidth_bytes_per_s": 300e9, "hop_latency_s": 1e-6},
                "outer": {"kind": "switch", "devices": 4, "link_bandwidth_bytes_per_s": 25e9, "hop_latency_s": 5e-6},
            },
        },
    ),
}

CALIBRATION_EXAMPLES = {
    "a100-gemm": Example(
        summary="Fit the A100's bf16 GEMMs, holding half out",
        value={"hardware": "a100-sxm-80gb", "op_families": ["matmul"], "dtype": "bf16", "holdout_fraction": 0.5},
    ),
}

INFERENCE_EXAMPLES = {
    "llama-70b-h100": Example(
        summary="Llama-3-70B on 4 H100s at TP4: 32 requests of 2k prompt and 256 output tokens",
        value={
            "model": "llama-3-70b",
            "hardware": "h100-sxm",
            "devices": 4,
            "parallelism": {"tensor": 4},
            "workload": {"batch": 32, "prompt_tokens": 2048, "output_tokens": 256},
            "dtypes": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
            "price_per_device_hour": 2.5,
        },
    ),
    "seed-004-mqa": Example(
        summary="Seed 004: the MHA-vs-MQA calculator's model and A100 (1935 GB/s, efficiency 0.5), as MQA",
        value={
            "model": "seed-calculator",
            "hardware": "a100-sxm-80gb",
            "hardware_patch": {"memory": {"device": {"bandwidth_bytes_per_s": 1935e9}}},
            "options": {"matmul_efficiency": 0.5, "memory_efficiency": 1.0, "launch_overhead_s": 5e-6},
            "workload": {"batch": 10, "prompt_tokens": 1, "output_tokens": 1024},
            "dtypes": {"weights": "fp16", "activations": "fp16"},
            "implementation": {"attention": "naive", "fused": False},
            "attention": {"kind": "mqa"},
        },
    ),
    "mixtral-int8": Example(
        summary="Mixtral 8x7B, int8 weights and fp8 KV cache, on 2 H100s with experts split over both",
        value={
            "model": "mixtral-8x7b",
            "hardware": "h100-sxm",
            "parallelism": {"tensor": 2, "expert": 2},
            "workload": {"batch": 16, "prompt_tokens": 1024, "output_tokens": 512},
            "dtypes": {"weights": "int8", "activations": "bf16", "kv_cache": "fp8"},
        },
    ),
    "maverick-fp8": Example(
        summary="Llama 4 Maverick (every other layer MoE: 128 experts, top-1) in fp8 on 8 H200s, experts spread over "
        "all 8",
        value={
            "model": "llama-4-maverick",
            "hardware": "h200-sxm",
            "devices": 8,
            "parallelism": {"tensor": 8, "expert": 8},
            "workload": {"batch": 64, "prompt_tokens": 4096, "output_tokens": 1024},
            "dtypes": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"},
        },
    ),
    "calibrated": Example(
        summary="Llama-3-8B on one A100 with the newest calibration of the profile (POST /v1/calibrations); ops it "
        "does not cover, or none stored, keep the physical model, and assumptions.calibration says which",
        value={
            "model": "llama-3-8b",
            "hardware": "a100-sxm-80gb",
            "workload": {"batch": 8, "prompt_tokens": 1024, "output_tokens": 128},
            "options": {"calibration": "latest"},
        },
    ),
    "mixed-requests": Example(
        summary="A batch of requests of different lengths on one A100",
        value={
            "model": "llama-3-8b",
            "hardware": "a100-sxm-80gb",
            "workload": {
                "requests": [
                    {"prompt_tokens": 512, "output_tokens": 128},
                    {"prompt_tokens": 4096, "output_tokens": 64},
                    {"prompt_tokens": 128, "output_tokens": 1024},
                ]
            },
        },
    ),
}
INFERENCE_BATCH_EXAMPLES = {
    "capacity-sweep": Example(
        summary="Capacity sweep: Llama-3-70B on H100s over batch × TP × weight dtype (4 × 3 × 2 = 24 runs)",
        value={
            "sweep": {
                "base": {
                    "model": "llama-3-70b",
                    "hardware": "h100-sxm",
                    "workload": {"batch": 8, "prompt_tokens": 2048, "output_tokens": 512},
                },
                "vary": {
                    "workload.batch": [8, 32, 64, 128],
                    "parallelism.tensor": [2, 4, 8],
                    "dtypes.weights": ["bf16", "fp8"],
                },
            }
        },
    ),
    "list": Example(
        summary="Two runs side by side: the same model on an A100 and on an H100",
        value={
            "items": [
                {
                    "model": "llama-3-8b",
                    "hardware": h,
                    "workload": {"batch": 8, "prompt_tokens": 1024, "output_tokens": 256},
                }
                for h in ("a100-sxm-80gb", "h100-sxm")
            ]
        },
    ),
}
PLAN_EXAMPLES = {
    "llama-70b-chat": Example(
        summary="Llama-3-70B chat at 20 requests/s (2k prompt, 256 output): p90 TTFT ≤ 1 s, TPOT ≤ 50 ms",
        value={
            "model": "llama-3-70b",
            "hardware": ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200"],
            "traffic": {"requests_per_s": 20, "prompt_tokens": 2048, "output_tokens": 256},
            "objectives": {"ttft_s": 1.0, "tpot_s": 0.05, "percentile": "p90"},
            "search": {
                "tensor": [1, 2, 4, 8],
                "max_num_seqs": [16, 32, 64, 128, 256],
                "max_num_batched_tokens": [2048, 8192],
                "dtypes": [{"weights": "bf16"}, {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}],
            },
            "prices": {"a100-sxm-80gb": 1.8, "h100-sxm": 2.9, "h200-sxm": 3.7, "b200": 5.5},
            "max_results": 5,
        },
    ),
    "disaggregated": Example(
        summary="Llama-3-8B, long prompts: aggregated against disaggregated prefill/decode on H100s, p99 objectives",
        value={
            "model": "llama-3-8b",
            "hardware": ["h100-sxm"],
            "traffic": {"output_tokens_per_s": 20000,
                        "prompt_tokens": {"kind": "lognormal", "mean": 6000, "std": 2000},
                        "output_tokens": {"kind": "lognormal", "mean": 300, "std": 100}},
            "objectives": {"ttft_s": 2.0, "tpot_s": 0.03, "percentile": "p99"},
            "search": {"tensor": [1, 2], "modes": ["aggregated", "disaggregated"],
                       "ratios": [{"prefill": 1, "decode": 1}, {"prefill": 2, "decode": 1}],
                       "max_num_seqs": [32, 64, 128], "max_num_batched_tokens": [8192]},
            "max_results": 3,
        },
    ),
    "impossible": Example(
        summary="An objective nothing meets: the closest configurations and what each misses",
        value={
            "model": "llama-3.1-405b",
            "hardware": ["h100-sxm"],
            "traffic": {"output_tokens_per_s": 5000, "prompt_tokens": 8192, "output_tokens": 512},
            "objectives": {"ttft_s": 0.1, "tpot_s": 0.005},
            "search": {"tensor": [8], "pipeline": [2], "max_num_seqs": [8, 32]},
            "max_results": 3,
        },
    ),
}  # fmt: skip

TRAINING_EXAMPLES = {
    "llama-2-13b-megatron": Example(
        summary="Llama 2 13B on 8 A100s: TP2 with SP × PP2 × DP2, ZeRO-1, selective recomputation",
        value={
            "model": "llama-2-13b", "hardware": "a100-sxm-80gb", "devices": 8,
            "parallelism": {"tensor": 2, "sequence_parallel": True, "pipeline": 2, "data": 2},
            "sharding": {"zero": 1}, "sequence": 4096, "micro_batch": 2, "global_batch": 64,
            "recompute": "selective", "train_tokens": 2e12, "price_per_device_hour": 2.0,
        },
    ),
    "llama-8b-fsdp": Example(
        summary="Llama 3 8B on 8 H100s with FSDP, FlashAttention-2, bf16",
        value={
            "model": "llama-3-8b", "hardware": "h100-sxm", "devices": 8, "sharding": {"fsdp": "full"},
            "sequence": 8192, "micro_batch": 1, "global_batch": 64, "train_tokens": 1e12,
        },
    ),
}  # fmt: skip

SERVING_EXAMPLES = {
    "llama-70b-chunked": Example(
        summary="Llama 3 70B on 8 H100s (2 engines of TP4), chunked prefill, 64 concurrent clients",
        value={
            "model": "llama-3-70b", "hardware": "h100-sxm", "replicas": 2, "parallelism": {"tensor": 4},
            "engine": {"scheduler": "chunked", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
            "dtypes": {"weights": "fp8", "activations": "fp8"},
            "load": {"concurrency": 64, "requests": 2000, "prompt_tokens": {"kind": "fixed", "value": 2048},
                     "output_tokens": {"kind": "fixed", "value": 256}},
            "objectives": {"ttft_s": 1.0, "tpot_s": 0.05}, "price_per_device_hour": 2.5,
        },
    ),
    "llama-8b-poisson": Example(
        summary="Llama 3 8B on one H100, Poisson arrivals at 10 requests/s, log-normal lengths",
        value={
            "model": "llama-3-8b", "hardware": "h100-sxm",
            "load": {"rate_per_s": 10, "requests": 3000, "seed": 1,
                     "prompt_tokens": {"kind": "lognormal", "mean": 1500, "std": 800},
                     "output_tokens": {"kind": "lognormal", "mean": 300, "std": 150}},
        },
    ),
    "llama-8b-chat-sessions": Example(
        summary="Llama 3 8B on 2 H100s behind the prefix-aware router: chat sessions of 1-8 turns after a "
        "2 048-token system prompt, prefix caching on (the engines' default)",
        value={
            "model": "llama-3-8b", "hardware": "h100-sxm", "replicas": 2, "router": "prefix_aware",
            "load": {"rate_per_s": 1, "requests": 1000, "seed": 1, "prefix_tokens": 2048,
                     "sessions": {"turns": {"kind": "uniform", "low": 1, "high": 8},
                                  "think_s": {"kind": "exponential", "mean": 10}},
                     "prompt_tokens": {"kind": "lognormal", "mean": 200, "std": 100},
                     "output_tokens": {"kind": "lognormal", "mean": 250, "std": 120}},
        },
    ),
    "deepseek-r1-mtp": Example(
        summary="DeepSeek-R1 on 8 B200s (TP8, block-scaled fp8) with its multi-token-prediction module: 1 draft "
        "token, 85 % kept (DeepSeek-V3 technical report §5.4.3: 85-90 % acceptance of the second token)",
        value={
            "model": "deepseek-r1", "hardware": "b200", "parallelism": {"tensor": 8},
            "dtypes": {"weights": "fp8", "activations": "fp8", "fp8_scaling": "block"},
            "engine": {"speculative": {"method": "mtp", "draft_tokens": 1, "accepted_tokens": 0.85}},
            "load": {"concurrency": 32, "requests": 256, "prompt_tokens": {"kind": "fixed", "value": 1024},
                     "output_tokens": {"kind": "fixed", "value": 1024}},
        },
    ),
    "disaggregated": Example(
        summary="Llama 3 70B disaggregated: 1 prefill worker (TP4) and 1 decode worker (TP4) on 8 H100s",
        value={
            "model": "llama-3-70b", "hardware": "h100-sxm", "mode": "disaggregated",
            "prefill": {"workers": 1, "parallelism": {"tensor": 4}},
            "decode": {"workers": 1, "parallelism": {"tensor": 4}},
            "load": {"concurrency": 32, "requests": 1000, "prompt_tokens": {"kind": "fixed", "value": 4096},
                     "output_tokens": {"kind": "fixed", "value": 512}},
        },
    ),
}  # fmt: skip

TRAINING_PLAN_EXAMPLES = {
    "llama-70b-64-h100": Example(
        summary="Llama 3 70B on 64 H100s, 1M-token steps, 15T tokens: the five fastest layouts that fit",
        value={
            "model": "llama-3-70b", "hardware": "h100-sxm", "devices": 64, "sequence": 8192, "global_batch": 128,
            "train_tokens": 15e12, "price_per_device_hour": 2.5, "max_results": 5,
        },
    ),
    "llama-8b-node-range": Example(
        summary="Llama 3 8B on 8 to 64 H100s in whole nodes, fewest device-hours first, FSDP or ZeRO-1",
        value={
            "model": "llama-3-8b", "hardware": "h100-sxm", "devices": {"min": 8, "max": 64, "step": 8},
            "sequence": 4096, "global_batch": 256, "train_tokens": 1e12, "rank_by": "device_hours",
            "search": {"tensor": [1, 2, 4], "pipeline": [1, 2], "sharding": [{"zero": 1}, {"fsdp": "full"}],
                       "micro_batch": [1, 2, 4], "recompute": ["none", "selective"]},
            "max_results": 3,
        },
    ),
}  # fmt: skip

# POST /v1/traces: one example per media type (OpenAPI examples of a request body's content, as plain dicts). The
# Azure and Mooncake lines are shaped as those traces publish them (adapters._traces cites where).
TRACE_UPLOAD_EXAMPLES: dict[str, dict[str, dict[str, Any]]] = {
    "application/json": {
        "chat-burst": {
            "summary": "Four chat requests in half a second, as Ridgeline's JSON document",
            "value": {
                "name": "chat-burst",
                "requests": [
                    {"arrival_s": 0.0, "prompt_tokens": 812, "output_tokens": 164},
                    {"arrival_s": 0.11, "prompt_tokens": 2048, "output_tokens": 256},
                    {"arrival_s": 0.27, "prompt_tokens": 377, "output_tokens": 91},
                    {"arrival_s": 0.48, "prompt_tokens": 1530, "output_tokens": 402},
                ],
            },
        }
    },
    "text/csv": {
        "ridgeline": {
            "summary": "Ridgeline's columns",
            "value": "arrival_s,prompt_tokens,output_tokens\n0.0,812,164\n0.11,2048,256\n0.27,377,91\n",
        },
        "azure": {
            "summary": "Azure LLM inference trace (2023 code trace's columns)",
            "value": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
            "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.4405330,879,31\n",
        },
    },
    "application/x-ndjson": {
        "mooncake": {
            "summary": "Mooncake trace lines (timestamps in milliseconds)",
            "value": '{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1, 2]}\n'
            '{"timestamp": 3052, "input_length": 6472, "output_length": 26, "hash_ids": [3, 4]}\n',
        }
    },
}
