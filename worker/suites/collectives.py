"""Collectives over the local devices with `shard_map`: psum (all-reduce), all_gather, psum_scatter
(reduce-scatter) and all_to_all. On a host without accelerators they run over virtual CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8, set by the CLI before JAX starts).

Sizes follow nccl-tests, as schemas.benchmarks.Collective says: `bytes` is the gathered output for all_gather, the
per-device input for reduce_scatter and all_reduce, the per-device buffer for all_to_all.
"""

from __future__ import annotations

from typing import Any

from worker.suites._base import Case, Context, Target, primary_dtype
from worker.timing import Stats

__all__ = ["plan_collectives"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _body(collective: str) -> Any:
    from worker.suites._jax import lax

    if collective == "all_reduce":
        return lambda x: lax.psum(x, "x")
    if collective == "all_gather":
        return lambda x: lax.all_gather(x, "x", tiled=True)
    if collective == "reduce_scatter":
        return lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True)
    return lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True)


def _runner(collective: str, per_device: int, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import jax
        import numpy as np
        from jax import sharding

        from worker.suites._jax import block, shard_map
        from worker.timing import measure, rotation_sets

        mesh_type: Any = sharding.Mesh
        named: Any = sharding.NamedSharding
        spec: Any = sharding.PartitionSpec
        devices = jax.devices()
        mesh = mesh_type(np.array(devices), ("x",))
        sharded = named(mesh, spec("x"))
        # psum leaves every device the same value: replicated out_specs. all_gather too, but shard_map cannot prove
        # it, so its copies are laid side by side (P("x")), which moves nothing more.
        out = spec() if collective == "all_reduce" else spec("x")
        fn = jax.jit(shard_map(_body(collective), mesh, in_specs=spec("x"), out_specs=out))
        jdtype = ctx.jax.dtype(dtype)
        make = jax.jit(
            lambda key: jax.random.uniform(key, (per_device * len(devices),), minval=-1.0, maxval=1.0).astype(jdtype),
            out_shardings=sharded,
        )
        # Rotate past the cache each device has: its own L2 on a GPU; the host's one LLC for virtual CPU devices.
        shared = len(devices) if ctx.target.device.platform == "cpu" else 1
        set_bytes = per_device * np.dtype(jdtype).itemsize * shared
        sets = [make(jax.random.PRNGKey(i)) for i in range(rotation_sets(set_bytes, ctx.policy))]
        block(sets)
        return measure(lambda i: fn(sets[i]), block, len(sets), ctx.policy)

    return run


def plan_collectives(target: Target) -> list[Case]:
    n = target.local_devices
    if n < 2:
        return []
    dtype = primary_dtype(target)
    itemsize = 4 if dtype == "fp32" else 2
    sizes = target.pick(
        quick=(1 << 12, 1 << 20),  # latency-bound and bandwidth-bound
        cpu=(1 << 12, 1 << 16, 1 << 20, 1 << 24),
        accelerator=tuple(1 << p for p in range(16, 31, 2)),
    )
    cases = []
    for per_device_bytes in sizes:
        # A multiple of n elements per device, so psum_scatter and all_to_all split it evenly.
        per_device = max(n, per_device_bytes // itemsize // n * n)
        for collective in COLLECTIVES:
            nbytes = per_device * itemsize * (n if collective == "all_gather" else 1)
            op = {"kind": "collective", "collective": collective, "bytes": nbytes, "devices": n, "dtype": dtype}
            cases.append(
                Case("collectives", f"{collective} {per_device * itemsize} B/device × {n} {dtype}", op,
                     _runner(collective, per_device, dtype))
            )  # fmt: skip
    return cases
