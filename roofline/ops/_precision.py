"""How a matmul of fp32 inputs runs: the precision a framework asks for, and the rate the device gives it.

JAX 0.10.2, `jax/_src/lax/lax.py` `Precision` (its docstring), the rules the worker's matmuls run under:
- DEFAULT: "On TPU: performs float32 computations in bfloat16. On GPU: uses tensorfloat32 if available (e.g. on A100
  and H100 GPUs), otherwise standard float32 (e.g. on V100 GPUs)"; it has "no impact on CPU backends".
- HIGH: "On TPU: performs float32 computations in 3 bfloat16 passes"; HIGHEST: "On TPU: ... in 6 bfloat16", "On GPU:
  uses float32".
PyTorch runs a float32 matmul in full fp32 unless TF32 is enabled (`torch.backends.cuda.matmul.allow_tf32`, off by
default since 1.12): its default is `highest` here. bf16x3 is XLA's `ALG_DOT_BF16_BF16_F32_X3` (JAX's
`DotAlgorithmPreset.BF16_BF16_F32_X3`, lax.py: "uses 3 operations to emulate higher precision"): each operand split
into a bf16 high and low part, and the three products hi·hi, hi·lo, lo·hi summed in fp32 on the bf16 matrix unit.
Full fp32 runs on a matrix unit only where the device has an fp32 matrix rate (AMD's FP32 MFMA); NVIDIA tensor cores
take no fp32 operands (CUDA C++ Programming Guide, warp matrix functions: element types are half, bf16, tf32, fp8,
integer and double), so cuBLAS's plain SGEMM runs on the CUDA cores at the fp32 vector rate.
"""

from __future__ import annotations

from roofline._hardware import Hardware

PRECISIONS = ("default", "tf32", "bf16x3", "highest")

# bf16 passes of each multi-pass algorithm (XLA's ALG_DOT_BF16_BF16_F32_X3 / _X6).
_BF16_PASSES = {"bf16": 1.0, "bf16x3": 3.0, "bf16x6": 6.0}


def matmul_algorithm(hw: Hardware, dtype: str, precision: str = "default") -> str:
    """What runs a matmul of `dtype` inputs at `precision` on `hw`: `dtype` itself unless the inputs are fp32, else
    "tf32", "bf16" (one pass), "bf16x3", "bf16x6" or "fp32" (JAX's rules for the device's kind, module docstring).
    Precision only changes fp32 inputs: a bf16 matmul is a bf16 matmul at every precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown matmul precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if dtype != "fp32":
        return dtype
    if precision == "default":
        if hw.kind == "tpu":
            return "bf16"
        return "tf32" if hw.kind == "gpu" and "tf32" in hw.matrix_flops_per_s else "fp32"
    if precision == "highest":
        return "bf16x6" if hw.kind == "tpu" else "fp32"
    return precision


def matmul_rate(hw: Hardware, dtype: str, precision: str = "default") -> tuple[float, str, str]:
    """Peak FLOP/s (counting the product's own 2·m·n·k FLOPs) of a matmul of `dtype` inputs at `precision`, the unit
    that runs it ("matrix" or "vector") and the algorithm (`matmul_algorithm`): an n-pass bf16 algorithm runs at
    the bf16 matrix rate / n."""
    algorithm = matmul_algorithm(hw, dtype, precision)
    if algorithm in _BF16_PASSES:
        if "bf16" not in hw.matrix_flops_per_s:
            raise ValueError(f"{hw.name} has no bf16 matrix rate for fp32 precision {precision} ({algorithm})")
        return hw.matrix_flops_per_s["bf16"] / _BF16_PASSES[algorithm], "matrix", algorithm
    if algorithm == "tf32" and dtype == "fp32" and "tf32" not in hw.matrix_flops_per_s:
        raise ValueError(f"{hw.name} has no tf32 matrix rate; fp32 precision tf32 needs one (try highest or bf16x3)")
    peak, unit = hw.matrix_peak(algorithm)
    return peak, unit, algorithm
