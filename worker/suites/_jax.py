"""JAX plumbing shared by the suites: dtypes, random inputs rotated past the caches, and timing.

JAX's own annotations do not cover everything we call (device kinds, Pallas ops), so arrays and jitted functions
cross this boundary as `Any`; the numbers that come back (`Stats`) are typed.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from worker.suites._skip import SkipCase
from worker.timing import Stats, TimingPolicy, measure, rotation_sets

__all__ = ["JAX_DTYPES", "JaxRuntime", "block", "lax", "shard_map"]

Array = Any
# Parts of JAX without annotations (collectives, shard_map, block_until_ready), used through `Any`.
_jax: Any = jax
lax: Any = jax.lax

JAX_DTYPES: dict[str, Any] = {
    "fp32": jnp.float32,
    "tf32": jnp.float32,  # stored as fp32; the matmul's precision makes it tf32
    "bf16": jnp.bfloat16,
    "fp16": jnp.float16,
    "fp8": jnp.float8_e4m3fn,
}

_POOL_MIN_ELEMENTS = 1 << 22


def shard_map(f: Callable[..., Any], mesh: Any, in_specs: Any, out_specs: Any) -> Callable[..., Any]:
    """`jax.shard_map` (JAX ≥ 0.6), or `jax.experimental.shard_map.shard_map` before it moved."""
    if hasattr(_jax, "shard_map"):
        wrapped: Callable[..., Any] = _jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
        return wrapped
    legacy: Any = importlib.import_module("jax.experimental.shard_map")  # pragma: no cover - JAX < 0.6
    old: Callable[..., Any] = legacy.shard_map(f, mesh, in_specs=in_specs, out_specs=out_specs)
    return old


def block(value: Any) -> None:
    """Wait until every array in `value` is computed (JAX dispatches asynchronously)."""
    _jax.block_until_ready(value)


class JaxRuntime:
    """Makes input sets from one random pool per dtype and times jitted or eager functions on them."""

    def __init__(self, policy: TimingPolicy, seed: int = 0) -> None:
        self.policy = policy
        self._key = jax.random.PRNGKey(seed)
        self._pools: dict[str, Array] = {}
        # One compiled slice per size: cutting a set out of the pool is a device copy, not a new random draw.
        self._take = jax.jit(lambda pool, offset, n: jax.lax.dynamic_slice(pool, (offset,), (n,)), static_argnums=2)

    @staticmethod
    def dtype(name: str) -> Any:
        try:
            return JAX_DTYPES[name]
        except KeyError:
            raise ValueError(f"no JAX dtype for {name!r}") from None

    def _pool(self, dtype: str, elements: int) -> Array:
        pool = self._pools.get(dtype)
        if pool is None or pool.shape[0] < elements:
            self._key, sub = jax.random.split(self._key)
            size = max(elements, _POOL_MIN_ELEMENTS)
            # Uniform in [-1, 1): random data, never zeros (a multiply by zero can be cheaper on some units).
            values = jax.random.uniform(sub, (size,), jnp.float32, minval=-1.0, maxval=1.0)
            pool = values.astype(self.dtype(dtype))
            block(pool)
            self._pools[dtype] = pool
        return pool

    def inputs(self, shapes: Sequence[tuple[int, ...]], dtype: str, sets: int | None = None) -> list[tuple[Array, ...]]:
        """Copies of random inputs of these shapes, enough of them to rotate past the last-level cache."""
        itemsize = np.dtype(self.dtype(dtype)).itemsize
        sizes = [math.prod(shape) for shape in shapes]
        count = sets if sets is not None else rotation_sets(sum(sizes) * itemsize, self.policy)
        pool = self._pool(dtype, max(sizes))
        span = pool.shape[0]
        result: list[tuple[Array, ...]] = []
        for i in range(count):
            arrays = []
            for j, (shape, size) in enumerate(zip(shapes, sizes, strict=True)):
                # Different offsets so that sets differ in content, not only in address.
                offset = ((i * len(shapes) + j) * 7919 * 16) % (span - size + 1)
                arrays.append(self._take(pool, offset, size).reshape(shape))
            result.append(tuple(arrays))
        block(result)
        return result

    def time(self, fn: Callable[..., Any], sets: list[tuple[Array, ...]], policy: TimingPolicy | None = None) -> Stats:
        """Wall-clock time of `fn(*inputs)` until its outputs are ready, rotating through `sets`."""
        return measure(lambda i: fn(*sets[i]), block, len(sets), policy or self.policy)

    def run(
        self,
        fn: Callable[..., Any],
        shapes: Sequence[tuple[int, ...]],
        dtype: str,
        optional: bool = False,
        policy: TimingPolicy | None = None,
    ) -> Stats:
        """Time `fn` on fresh inputs, under `policy` if given (else the run's). `optional`: a first call that fails
        (an fp8 product this XLA cannot lower, a Pallas kernel this GPU lacks) skips the case instead of failing it."""
        sets = self.inputs(shapes, dtype)
        if optional:
            try:
                block(fn(*sets[0]))
            except Exception as err:
                first_line = str(err).splitlines()[0] if str(err) else ""
                raise SkipCase(f"{type(err).__name__}: {first_line}") from err
        return self.time(fn, sets, policy)
