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

__all__ = ["dispatch_probe", "matmul_op", "plan_ceilings", "plan_matmul", "suite_precision", "wave_edge"]


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


def _run_matmul(m: int, n: int, k: int, dtype: str, ceiling: bool = False, optional: bool = False) -> Any:
    def run(ctx: Context) -> Stats:
        import jax
        import jax.numpy as jnp

        precision = _precision(dtype)
        out = jnp.bfloat16 if dtype == "fp8" else None
        fn = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision, preferred_element_type=out))
        # fp8 and tf32 depend on the GPU generation and the XLA build: where one does not lower, skip it.
        policy = ctx.ceiling_policy if ceiling else None
        skippable = optional or dtype in ("fp8", "tf32")
        return ctx.jax.run(fn, [(m, k), (k, n)], dtype, optional=skippable, policy=policy)

    return run


def _run_copy(elements: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import jax

        # x + 1 rather than a bare copy: XLA may alias or elide a copy, never an add.
        return ctx.jax.run(jax.jit(lambda x: x + 1), [(elements,)], dtype)

    return run


def _run_stream(cols: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import jax
        import jax.numpy as jnp

        return ctx.jax.run(jax.jit(lambda x: jnp.sum(x, axis=-1)), [(1, cols)], dtype, policy=ctx.ceiling_policy)

    return run


# The CPU ceilings that a host profile is built from (worker.hostprofile): a matmul too small for its math to count
# (2·32³ FLOPs, under 1 µs at 100 GFLOP/s) times the fixed cost of one XLA:CPU call (dispatch, the thread pool's
# fork and join, block_until_ready); the largest square the size allows, the matmul peak; a sum over 2²⁴ fp32 (64 MiB,
# more than a host's last-level cache), the rate at which memory streams in. A read, not a copy: XLA:CPU allocates
# every output, and an output above glibc's mmap threshold (at most 32 MiB: mallopt(3), M_MMAP_THRESHOLD) is a fresh
# mapping each call, so a large copy times page faults, while a small one writes into the cache.
CPU_DISPATCH_N = 32
CPU_STREAM_ELEMENTS = 1 << 24


def _plan_cpu_ceilings(target: Target) -> list[Case]:
    n = target.pick(quick=512, cpu=2048, accelerator=2048)
    d = CPU_DISPATCH_N
    cases = [
        # The fixed cost is timed as the suites time their ops (the run's policy, inputs rotated): a second-long hot
        # loop keeps XLA:CPU's thread pool spinning and reports a fraction (~6 µs against ~37 µs) of what a suite's
        # call pays.
        Case("ceilings", f"dispatch: matmul {d}³ fp32", matmul_op(d, d, d, "fp32", suite_precision("fp32")),
             _run_matmul(d, d, d, "fp32"), notes={"ceiling": "dispatch"}),
        Case("ceilings", f"peak matmul {n}³ fp32", matmul_op(n, n, n, "fp32", suite_precision("fp32")),
             _run_matmul(n, n, n, "fp32", ceiling=True), notes={"ceiling": "matmul_peak"}),
        # bf16 where XLA:CPU lowers it; sent only where the device's profile has a bf16 peak to predict it with.
        Case("ceilings", f"peak matmul {n}³ bf16", matmul_op(n, n, n, "bf16"),
             _run_matmul(n, n, n, "bf16", ceiling=True, optional=True), notes={"ceiling": "matmul_peak"},
             upload=target.profile_dtypes is not None and "bf16" in target.profile_dtypes),
    ]  # fmt: skip
    cols = CPU_STREAM_ELEMENTS
    stream = {"kind": "reduction", "rows": 1, "cols": cols, "dtype": "fp32"}
    cases.append(Case("ceilings", f"stream bandwidth sum(x), {cols} fp32", stream, _run_stream(cols, "fp32"),
                      notes={"ceiling": "stream"}))  # fmt: skip
    return cases


def dispatch_probe(target: Target) -> Case:
    """An accelerator's per-call host cost: a 32³ product in the device's main dtype, whose kernel is the shortest
    the device runs, timed as the suites time theirs (host clock around the call and `block_until_ready`). The run
    states what it measured less that kernel (`worker.results.host_overhead_s`) and keeps the probe itself: sent,
    it would be predicted from its own measurement."""
    d = CPU_DISPATCH_N
    dtype = primary_dtype(target)
    return Case("ceilings", f"dispatch: matmul {d}³ {dtype}", matmul_op(d, d, d, dtype, suite_precision(dtype)),
                _run_matmul(d, d, d, dtype), notes={"ceiling": "dispatch"}, upload=False)  # fmt: skip


def _copy_case(target: Target) -> Case:
    elements = target.pick(quick=1 << 22, cpu=1 << 25, accelerator=1 << 28)
    dtype = primary_dtype(target)
    copy = {"kind": "elementwise", "elements": elements, "inputs": 1, "outputs": 1, "flops_per_element": 0.0,
            "functions": ["add"], "dtype": dtype}  # fmt: skip
    return Case("ceilings", f"copy bandwidth y = x + 1, {elements} {dtype}", copy, _run_copy(elements, dtype))


def plan_ceilings(target: Target) -> list[Case]:
    """The numbers every other result is read against: peak matmul FLOP/s and copy bandwidth; on a CPU also the
    fixed cost of one call and a streaming read, which a host profile is built from."""
    if not target.accelerator:
        return [*_plan_cpu_ceilings(target), _copy_case(target)]
    cases = []
    n = target.pick(quick=512, cpu=2048, accelerator=8192)
    for dtype in dtypes_for(target):
        cases.append(
            Case(
                "ceilings",
                f"peak matmul {n}³ {dtype}",
                matmul_op(n, n, n, dtype, suite_precision(dtype)),
                _run_matmul(n, n, n, dtype),
            )
        )
    return [*cases, _copy_case(target)]


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
