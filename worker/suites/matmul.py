"""Matrix products: the ceilings (peak FLOP/s, copy bandwidth) and the sweep over shapes and dtypes.

The sweep holds the seed lecture's cliffs (../shared/seeds/002): tile quantization (a dimension one past a tile
multiple), wave quantization (1792³ is 98 tiles of 256×128 on an A100's 108 SMs, one wave; 1793³ is 120 tiles,
two waves; the worker also finds the one-wave edge for its own SM count), and alignment (nanoGPT's vocabulary 50257
against 50304 = 64 × 786).
"""

from __future__ import annotations

import math
from typing import Any

from worker.suites._base import Case, Context, Target, dtypes_for, primary_dtype
from worker.timing import Stats

__all__ = ["matmul_op", "plan_ceilings", "plan_matmul", "suite_precision", "wave_edge"]


def matmul_op(m: int, n: int, k: int, dtype: str, precision: str = "default") -> dict[str, Any]:
    """The op of a product as it ran: `precision` is the one its fp32 inputs ran at (`schemas.ops.MatmulPrecision`;
    "default" is JAX's default precision, which the worker never changes: TF32 on GPUs that have it), so the
    service predicts the result at that rate."""
    op: dict[str, Any] = {"kind": "matmul", "m": m, "n": n, "k": k, "dtype": dtype, "precision": precision}
    if dtype == "fp8":
        op["out_dtype"] = "bf16"  # an fp8 product is written wider
    return op


def suite_precision(dtype: str) -> str:
    """The precision the matmul suite runs `dtype` at (`_precision`): fp32 at HIGHEST (full fp32), the rest at
    JAX's default (tf32 has its own algorithm and dtype)."""
    return "highest" if dtype == "fp32" else "default"


def _precision(dtype: str) -> Any:
    import jax

    if suite_precision(dtype) == "highest":
        return jax.lax.Precision.HIGHEST
    if dtype == "tf32":
        preset = getattr(jax.lax, "DotAlgorithmPreset", None)
        return preset.TF32_TF32_F32 if preset is not None else jax.lax.Precision.DEFAULT
    return None


def _run_matmul(m: int, n: int, k: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import jax
        import jax.numpy as jnp

        precision = _precision(dtype)
        out = jnp.bfloat16 if dtype == "fp8" else None
        fn = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision, preferred_element_type=out))
        # fp8 and tf32 depend on the GPU generation and the XLA build: where one does not lower, skip it.
        return ctx.jax.run(fn, [(m, k), (k, n)], dtype, optional=dtype in ("fp8", "tf32"))

    return run


def _run_copy(elements: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import jax

        # x + 1 rather than a bare copy: XLA may alias or elide a copy, never an add.
        return ctx.jax.run(jax.jit(lambda x: x + 1), [(elements,)], dtype)

    return run


def plan_ceilings(target: Target) -> list[Case]:
    """The two numbers every other result is read against: peak matmul FLOP/s and copy bandwidth."""
    cases = []
    n = target.pick(quick=512, cpu=2048, accelerator=8192)
    for dtype in dtypes_for(target) if target.accelerator else [primary_dtype(target)]:
        cases.append(
            Case(
                "ceilings",
                f"peak matmul {n}³ {dtype}",
                matmul_op(n, n, n, dtype, suite_precision(dtype)),
                _run_matmul(n, n, n, dtype),
            )
        )
    elements = target.pick(quick=1 << 22, cpu=1 << 25, accelerator=1 << 28)
    dtype = primary_dtype(target)
    copy = {"kind": "elementwise", "elements": elements, "inputs": 1, "outputs": 1, "flops_per_element": 0.0,
            "functions": ["add"], "dtype": dtype}  # fmt: skip
    cases.append(Case("ceilings", f"copy bandwidth y = x + 1, {elements} {dtype}", copy, _run_copy(elements, dtype)))
    return cases


def wave_edge(units: int, tile: tuple[int, int] = (256, 128), step: int = 128) -> int | None:
    """The largest n (a multiple of `step`) whose n×n output fills at most one wave of `tile` tiles on `units`
    compute units: ⌈n/tm⌉·⌈n/tn⌉ ≤ units. One more element (n + 1) adds a row and a column of tiles."""
    best = None
    n = step
    while math.ceil(n / tile[0]) * math.ceil(n / tile[1]) <= units:
        best = n
        n += step
    return best


def plan_matmul(target: Target) -> list[Case]:
    dtypes = dtypes_for(target)
    main = primary_dtype(target)
    shapes: list[tuple[int, int, int, str]] = []
    if target.quick:
        for n in (64, 128, 256, 257, 384, 512):
            shapes.append((n, n, n, "square"))
        shapes += [(1, 1024, 1024, "skinny"), (16, 1024, 1024, "skinny")]
        shapes += [(128, 5024, 256, "aligned"), (128, 5025, 256, "misaligned")]
    elif not target.accelerator:
        for n in (128, 256, 512, 1024, 1536, 2048):
            shapes.append((n, n, n, "square"))
        shapes += [(1023, 1023, 1023, "tile"), (1025, 1025, 1025, "tile")]
        shapes += [(m, 4096, 4096, "skinny") for m in (1, 8, 32, 128)]
        shapes += [(512, 50257, 768, "vocab 50257"), (512, 50304, 768, "vocab 50304")]
    else:
        for n in (256, 512, 1024, 2048, 4096, 6144, 8192):
            shapes.append((n, n, n, "square"))
        shapes += [(1792, 1792, 1792, "A100 one wave"), (1793, 1793, 1793, "A100 two waves")]
        shapes += [(4096, 4096, 4096 + 1, "k+1"), (4097, 4097, 4097, "tile+1")]
        # Waves of thread blocks over SMs/CUs are a GPU's; a TPU's TensorCores run one product at a time.
        units = target.device.compute_units if target.device.platform == "gpu" else None
        edge = wave_edge(units) if units else None
        if edge and edge not in (1792,):
            shapes += [(edge, edge, edge, "one wave here"), (edge + 1, edge + 1, edge + 1, "two waves here")]
        shapes += [(m, 8192, 8192, "decode") for m in (1, 8, 32, 128, 512)]
        shapes += [(8192, 50257, 768, "vocab 50257"), (8192, 50304, 768, "vocab 50304")]
    cases = []
    for m, n, k, label in shapes:
        # Every dtype on the square sizes; the cliffs and skinny shapes in the main dtype only.
        for dtype in dtypes if label == "square" else [main]:
            cases.append(
                Case(
                    "matmul",
                    f"{m}×{n}×{k} {dtype} ({label})",
                    matmul_op(m, n, k, dtype, suite_precision(dtype)),
                    _run_matmul(m, n, k, dtype),
                )
            )
    return cases
