"""Fusion, jitted against eager: the two exercises of ../shared/seeds/000 and elementwise chains.

Exercise 1: relu(A @ B) under `jax.jit` fuses the relu into the product's output (6N² bytes in bf16), eager it is a
second kernel that reads and writes C again (10N²). Chains of elementwise ops (sin²x + cos²x: one kernel fused,
five eager) show the same on the vector unit. Exercise 2: C @ relu(A @ B) with KV_HEAD = 128: ideal intensity
SEQUENCE/2, but the S×S intermediate goes through device memory unless it fits on chip; plus the P.S. of the
exercise, C @ (A @ B) against (C @ A) @ B.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from worker.suites._base import Case, Context, Target, primary_dtype
from worker.suites.matmul import matmul_op
from worker.timing import Stats

__all__ = ["plan_c_relu_ab", "plan_elementwise", "sin2_cos2_chain"]


def _ew(elements: int, inputs: int, functions: list[str], chained: int = 1, dtype: str = "bf16") -> dict[str, Any]:
    # The ALU cost comes from `functions` (XLA's measured per-element costs), so no extra flops_per_element.
    return {"kind": "elementwise", "elements": elements, "inputs": inputs, "outputs": 1, "flops_per_element": 0.0,
            "functions": functions, "chained_inputs": chained, "dtype": dtype}  # fmt: skip


def sin2_cos2_chain(n: int, dtype: str) -> list[dict[str, Any]]:
    """sin²x + cos²x as five elementwise ops: five kernels eager, one fused (the seed tests' chain)."""
    return [
        _ew(n, 1, ["sin"], dtype=dtype),
        _ew(n, 1, ["multiply"], dtype=dtype),  # square
        _ew(n, 1, ["cos"], chained=1, dtype=dtype),  # cos x: x is the chain's input again, on chip when fused
        _ew(n, 1, ["multiply"], dtype=dtype),  # square
        _ew(n, 2, ["add"], chained=2, dtype=dtype),  # add the two intermediates
    ]


def _runner(build: Callable[[], Callable[..., Any]], shapes: Sequence[tuple[int, ...]], dtype: str, jit: bool) -> Any:
    def run(ctx: Context) -> Stats:
        import jax

        fn = build()
        return ctx.jax.run(jax.jit(fn) if jit else fn, shapes, dtype)

    return run


def _relu_matmul() -> Callable[..., Any]:
    import jax

    return lambda a, b: jax.nn.relu(a @ b)


def _sin2_cos2() -> Callable[..., Any]:
    import jax.numpy as jnp

    return lambda x: jnp.sin(x) ** 2 + jnp.cos(x) ** 2


def _three_sigmoids() -> Callable[..., Any]:
    import jax

    return lambda x: jax.nn.sigmoid(jax.nn.sigmoid(jax.nn.sigmoid(x)))


def _multiply_add() -> Callable[..., Any]:
    return lambda x, y, z: x * y + z


def plan_elementwise(target: Target) -> list[Case]:
    dtype = primary_dtype(target)
    cases = []
    for n in target.pick(quick=(256, 512), cpu=(512, 1024, 2048), accelerator=(1024, 4096, 8192)):
        for jit, how in ((True, "jit"), (False, "eager")):
            op = matmul_op(n, n, n, dtype) | {"epilogue": ["relu"], "fuse_epilogue": jit}
            cases.append(
                Case(
                    "elementwise",
                    f"relu(A@B) {n}³ {dtype} {how}",
                    op,
                    _runner(_relu_matmul, [(n, n), (n, n)], dtype, jit),
                )
            )
    for n in target.pick(quick=(1 << 16, 1 << 20), cpu=(1 << 20, 1 << 24), accelerator=(1 << 20, 1 << 24, 1 << 27)):
        sin2_cos2 = sin2_cos2_chain(n, dtype)
        sigmoids = [{"kind": "activation", "elements": n, "function": "sigmoid", "dtype": dtype}] * 3
        # x·y, then + z: z comes from memory, only the product stays on chip.
        fma = [_ew(n, 2, ["multiply"], dtype=dtype), _ew(n, 2, ["add"], chained=1, dtype=dtype)]
        chains: list[tuple[str, list[dict[str, Any]], Callable[[], Callable[..., Any]], int]] = [
            ("sin²x + cos²x", sin2_cos2, _sin2_cos2, 1),
            ("sigmoid∘sigmoid∘sigmoid", sigmoids, _three_sigmoids, 1),
            ("x·y + z", fma, _multiply_add, 3),
        ]
        for label, ops, build, inputs in chains:
            for jit, how in ((True, "jit"), (False, "eager")):
                op = {"kind": "chain", "ops": ops, "fused": jit}
                shapes = [(n,)] * inputs
                cases.append(
                    Case("elementwise", f"{label} n={n} {dtype} {how}", op, _runner(build, shapes, dtype, jit))
                )
    return cases


def _c_relu_ab() -> Callable[..., Any]:
    import jax

    return lambda a, b, c: c @ jax.nn.relu(a @ b)


def _c_ab() -> Callable[..., Any]:
    return lambda a, b, c: c @ (a @ b)


def _ca_b() -> Callable[..., Any]:
    return lambda a, b, c: (c @ a) @ b


def plan_c_relu_ab(target: Target) -> list[Case]:
    """Seed 000, exercise 2: A[S, 128], B[128, S], C[128, S]; C @ relu(A @ B) is [128, S]."""
    dtype = primary_dtype(target)
    kv_head = 128
    cases = []
    for seq in target.pick(quick=(512, 1024), cpu=(1024, 2048, 4096), accelerator=(2048, 4096, 10_000)):
        shapes = [(seq, kv_head), (kv_head, seq), (kv_head, seq)]
        ab = matmul_op(seq, seq, kv_head, dtype)  # A @ B: [S, S]
        c_x = matmul_op(kv_head, seq, seq, dtype)  # C[128, S] @ X[S, S]: X is the B operand
        relu = {"kind": "activation", "elements": seq * seq, "function": "relu", "dtype": dtype}
        variants: list[tuple[str, list[dict[str, Any]], Callable[[], Callable[..., Any]], bool]] = [
            ("C @ relu(A @ B) jit", [ab, relu, c_x], _c_relu_ab, True),
            ("C @ relu(A @ B) eager", [ab, relu, c_x], _c_relu_ab, False),
            ("C @ (A @ B) jit", [ab, c_x], _c_ab, True),
            # (C @ A) is [128, 128]; times B [128, S]: no S×S intermediate at all.
            ("(C @ A) @ B jit", [matmul_op(kv_head, kv_head, seq, dtype), matmul_op(kv_head, seq, kv_head, dtype)],
             _ca_b, True),
        ]  # fmt: skip
        for label, ops, build, jit in variants:
            op = {"kind": "chain", "ops": ops, "fused": jit}
            cases.append(Case("c_relu_ab", f"{label} S={seq} {dtype}", op, _runner(build, shapes, dtype, jit)))
    return cases
