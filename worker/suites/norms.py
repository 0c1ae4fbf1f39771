"""Softmax, layer and RMS norm, a row reduction and activations: the memory-bound ops between the products.

XLA's softmax is recorded as multi-pass (`online: false`: max, then exp and sum, then divide); the Pallas softmax
on NVIDIA GPUs holds a row block on chip and reads it once (`online: true`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.suites._base import Case, Context, SkipCase, Target, primary_dtype
from worker.timing import Stats

__all__ = ["plan_norms"]


def _runner(build: Callable[[], Callable[..., Any]], rows: int, cols: int, dtype: str, optional: bool = False) -> Any:
    def run(ctx: Context) -> Stats:
        import jax

        return ctx.jax.run(jax.jit(build()), [(rows, cols)], dtype, optional=optional)

    return run


def _softmax() -> Callable[..., Any]:
    import jax

    return lambda x: jax.nn.softmax(x, axis=-1)


def _pallas_softmax() -> Callable[..., Any]:
    try:
        from jax.experimental.pallas.ops.gpu import softmax as pallas_softmax
    except Exception as err:  # pragma: no cover - needs a GPU build of jaxlib
        raise SkipCase(f"Pallas GPU softmax unavailable: {err}") from err
    return lambda x: pallas_softmax.softmax(x, axis=-1)


def _layernorm() -> Callable[..., Any]:
    import jax.numpy as jnp

    def layernorm(x: Any) -> Any:
        mean = jnp.mean(x, axis=-1, keepdims=True, dtype=jnp.float32)
        var = jnp.var(x, axis=-1, keepdims=True, dtype=jnp.float32)
        return ((x - mean) * (1.0 / jnp.sqrt(var + 1e-5))).astype(x.dtype)

    return layernorm


def _rmsnorm() -> Callable[..., Any]:
    import jax.numpy as jnp

    def rmsnorm(x: Any) -> Any:
        mean_square = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        return (x * (1.0 / jnp.sqrt(mean_square + 1e-6))).astype(x.dtype)

    return rmsnorm


def _row_sum() -> Callable[..., Any]:
    import jax.numpy as jnp

    return lambda x: jnp.sum(x, axis=-1)


def _gelu_tanh() -> Callable[..., Any]:
    import jax

    return lambda x: jax.nn.gelu(x, approximate=True)


def _silu() -> Callable[..., Any]:
    import jax

    return lambda x: jax.nn.silu(x)


def plan_norms(target: Target) -> list[Case]:
    dtype = primary_dtype(target)
    shapes = target.pick(
        quick=((256, 1024), (1024, 1024)),
        cpu=((1024, 1024), (4096, 4096), (8192, 1024)),
        accelerator=((4096, 4096), (16384, 8192), (32768, 1024), (8192, 32768)),
    )
    cases = []
    for rows, cols in shapes:
        size = {"rows": rows, "cols": cols, "dtype": dtype}
        where = f"{rows}×{cols} {dtype}"
        cases += [
            Case("norms", f"softmax {where}", {"kind": "softmax", "online": False, **size},
                 _runner(_softmax, rows, cols, dtype)),
            Case("norms", f"layernorm {where}", {"kind": "layernorm", **size}, _runner(_layernorm, rows, cols, dtype)),
            Case("norms", f"rmsnorm {where}", {"kind": "rmsnorm", **size}, _runner(_rmsnorm, rows, cols, dtype)),
            Case("norms", f"row sum {where}", {"kind": "reduction", **size}, _runner(_row_sum, rows, cols, dtype)),
            Case("norms", f"gelu (tanh) {where}",
                 {"kind": "activation", "elements": rows * cols, "function": "gelu_tanh", "dtype": dtype},
                 _runner(_gelu_tanh, rows, cols, dtype)),
            Case("norms", f"silu {where}",
                 {"kind": "activation", "elements": rows * cols, "function": "silu", "dtype": dtype},
                 _runner(_silu, rows, cols, dtype)),
        ]  # fmt: skip
        if target.device.is_nvidia_gpu and not target.quick:
            cases.append(
                Case("norms", f"softmax (Pallas) {where}", {"kind": "softmax", "online": True, **size},
                     _runner(_pallas_softmax, rows, cols, dtype, optional=True))
            )  # fmt: skip
    return cases
