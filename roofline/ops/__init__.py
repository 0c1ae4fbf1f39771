"""Ops as the kernels they run, by family: matrix products and their tile search (`matmul`), attention with its
flash tile schedule, TensorRT-LLM's XQA decode and masked MHA (`attention`), and memory-bound streaming ops
(elementwise, activations, reductions, softmax, norms, rotary, embedding, cross-entropy); the kernels that
quantise a product's input (`QUANTIZATIONS`); a mixture-of-experts layer as a fused MoE runs it (`moe`).

Every function takes sizes as numbers or numpy arrays that broadcast together and returns the op's kernels
(`roofline.Kernel`); `roofline.single` and `roofline.chain` turn kernels into an `Estimate`.
"""

from roofline.ops._alu import FUNCTIONS, alu_cost
from roofline.ops._attention import DECODE_MAX_PACKED_GROUP, attention, causal_pairs
from roofline.ops._flash import PAGED_KV_ROUND_TRIPS, XQA_KV_ROUND_TRIPS
from roofline.ops._matmul import EPILOGUES, MISALIGNED_EFFICIENCY, matmul
from roofline.ops._memory_bound import (
    ACTIVATIONS,
    LAYERNORM_BLOCK_THREADS,
    MEMORY_ACCESS,
    activation,
    cross_entropy,
    elementwise,
    embedding,
    layernorm,
    reduction,
    rotary,
    softmax,
)
from roofline.ops._moe import ROUTINGS, moe, rank_load
from roofline.ops._precision import PRECISIONS, matmul_algorithm, matmul_rate
from roofline.ops._quantize import BLOCK_SCALED_FP4_K_TILE, FIXED_TILES, QUANTIZATIONS, Quantization
from roofline.ops._tile_search import K_STEP, SPLIT_K

__all__ = [
    "ACTIVATIONS",
    "BLOCK_SCALED_FP4_K_TILE",
    "DECODE_MAX_PACKED_GROUP",
    "EPILOGUES",
    "FIXED_TILES",
    "FUNCTIONS",
    "K_STEP",
    "LAYERNORM_BLOCK_THREADS",
    "MEMORY_ACCESS",
    "MISALIGNED_EFFICIENCY",
    "PAGED_KV_ROUND_TRIPS",
    "PRECISIONS",
    "QUANTIZATIONS",
    "ROUTINGS",
    "SPLIT_K",
    "XQA_KV_ROUND_TRIPS",
    "Quantization",
    "activation",
    "alu_cost",
    "attention",
    "causal_pairs",
    "cross_entropy",
    "elementwise",
    "embedding",
    "layernorm",
    "matmul",
    "matmul_algorithm",
    "matmul_rate",
    "moe",
    "rank_load",
    "reduction",
    "rotary",
    "softmax",
]
