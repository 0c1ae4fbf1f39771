"""The modelling core: pure Python + numpy, no web or database imports (enforced by import-linter).

Ops become kernels (`roofline._ops`), kernels become estimates (`roofline._kernels`): FLOPs, bytes to and from
device memory, compute, memory and overhead terms, and which one bounds. Every function is vectorised: sizes
may be numpy arrays that broadcast together, so a sweep of 10 000 shapes is one call.
"""

from roofline._estimate import Bound, Estimate, kernel_time
from roofline._hardware import DTYPE_BYTES, Hardware, dtype_bytes
from roofline._kernels import Kernel, chain, fuse, single
from roofline._ops import (
    ACTIVATIONS,
    MISALIGNED_EFFICIENCY,
    activation,
    attention,
    causal_pairs,
    cross_entropy,
    elementwise,
    embedding,
    layernorm,
    matmul,
    reduction,
    rotary,
    softmax,
)

__all__ = [
    "ACTIVATIONS",
    "DTYPE_BYTES",
    "MISALIGNED_EFFICIENCY",
    "Bound",
    "Estimate",
    "Hardware",
    "Kernel",
    "activation",
    "attention",
    "causal_pairs",
    "chain",
    "cross_entropy",
    "dtype_bytes",
    "elementwise",
    "embedding",
    "fuse",
    "kernel_time",
    "layernorm",
    "matmul",
    "reduction",
    "rotary",
    "single",
    "softmax",
]
