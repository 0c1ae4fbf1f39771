"""Attention, naive against flash (../shared/seeds/001).

Naive: softmax(QKᵀ)V with the B·N·T·S score matrix in device memory (intensity ≈ head_dim). Our own einsum version
and `jax.nn.dot_product_attention(implementation="xla")` (XLA materialises the scores too) are both `naive`.
Flash (tiled, online softmax; intensity grows with the sequence): the cuDNN implementation of
`dot_product_attention` and the Pallas kernels (Triton-lowered on NVIDIA GPUs, Mosaic on TPUs).
Layout [batch, seq, heads, head_dim] as `dot_product_attention` takes it; GQA repeats nothing in memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from worker.suites._base import Case, Context, SkipCase, Target, primary_dtype
from worker.timing import Stats

__all__ = ["Shape", "plan_attention"]


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    q_len: int
    kv_len: int
    causal: bool

    def op(self, implementation: str, dtype: str) -> dict[str, Any]:
        return {"kind": "attention", "batch": self.batch, "heads": self.heads, "kv_heads": self.kv_heads,
                "head_dim": self.head_dim, "q_len": self.q_len, "kv_len": self.kv_len, "causal": self.causal,
                "implementation": implementation, "dtype": dtype}  # fmt: skip

    def inputs(self) -> list[tuple[int, ...]]:
        return [
            (self.batch, self.q_len, self.heads, self.head_dim),
            (self.batch, self.kv_len, self.kv_heads, self.head_dim),
            (self.batch, self.kv_len, self.kv_heads, self.head_dim),
        ]

    def label(self) -> str:
        kind = "decode" if self.q_len == 1 else ("causal" if self.causal else "full")
        heads = f"{self.heads}" if self.kv_heads == self.heads else f"{self.heads}/{self.kv_heads}kv"
        return f"B{self.batch} H{heads} d{self.head_dim} T{self.q_len} S{self.kv_len} {kind}"


def _naive(shape: Shape) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    group = shape.heads // shape.kv_heads
    scale = 1.0 / math.sqrt(shape.head_dim)

    def attention(q: Any, k: Any, v: Any) -> Any:
        b, t, n, d = q.shape
        qg = q.reshape(b, t, n // group, group, d)
        scores = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32) * scale
        if shape.causal:
            # Bottom-right aligned: query i sees keys up to i + (S - T), as in a prefill after a cache.
            offset = shape.kv_len - shape.q_len
            mask = jnp.arange(shape.q_len)[:, None] + offset >= jnp.arange(shape.kv_len)[None, :]
            scores = jnp.where(mask, scores, -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgts,bskd->btkgd", weights, v)
        return out.reshape(b, t, n, d)

    return attention


def _dot_product_attention(shape: Shape, implementation: Literal["xla", "cudnn"]) -> Callable[..., Any]:
    import jax

    def attention(q: Any, k: Any, v: Any) -> Any:
        return jax.nn.dot_product_attention(q, k, v, is_causal=shape.causal, implementation=implementation)

    return attention


def _pallas_gpu(shape: Shape) -> Callable[..., Any]:
    try:
        from jax.experimental.pallas.ops.gpu import attention as pallas_attention
    except Exception as err:  # pragma: no cover - needs a GPU build of jaxlib
        raise SkipCase(f"Pallas GPU attention unavailable: {err}") from err
    if shape.kv_heads != shape.heads:
        raise SkipCase("the Pallas GPU kernel takes MHA only")
    scale = 1.0 / math.sqrt(shape.head_dim)
    return lambda q, k, v: pallas_attention.mha(q, k, v, None, sm_scale=scale, causal=shape.causal)


def _pallas_tpu(shape: Shape) -> Callable[..., Any]:
    try:
        from jax.experimental.pallas.ops.tpu import flash_attention as tpu_flash
    except Exception as err:  # pragma: no cover - needs a TPU
        raise SkipCase(f"Pallas TPU flash attention unavailable: {err}") from err
    if shape.kv_heads != shape.heads:
        raise SkipCase("the Pallas TPU kernel takes MHA only")
    scale = 1.0 / math.sqrt(shape.head_dim)

    def attention(q: Any, k: Any, v: Any) -> Any:
        # This kernel's layout is [batch, heads, seq, head_dim].
        t = (0, 2, 1, 3)
        out = tpu_flash.flash_attention(q.transpose(t), k.transpose(t), v.transpose(t), causal=shape.causal,
                                        sm_scale=scale)  # fmt: skip
        return out.transpose(t)

    return attention


def _runner(build: Callable[[Shape], Callable[..., Any]], shape: Shape, dtype: str) -> Any:
    def run(ctx: Context) -> Stats:
        import jax

        from worker.suites._jax import block

        fn = jax.jit(build(shape))
        sets = ctx.jax.inputs(shape.inputs(), dtype)
        try:
            block(fn(*sets[0]))  # compile here, so an unsupported case is a skip, not a failure
        except Exception as err:
            raise SkipCase(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from err
        return ctx.jax.time(fn, sets)

    return run


def _shapes(target: Target) -> list[Shape]:
    if target.quick:
        return [
            Shape(1, 4, 4, 64, 256, 256, False),
            Shape(1, 4, 4, 64, 512, 512, True),
            Shape(1, 8, 2, 64, 256, 256, True),  # GQA
            Shape(4, 8, 8, 64, 1, 1024, False),  # decode against a cache
        ]
    if not target.accelerator:
        return [
            Shape(1, 8, 8, 64, 1024, 1024, False),
            Shape(1, 8, 8, 64, 2048, 2048, True),
            Shape(1, 16, 4, 64, 1024, 1024, True),
            Shape(8, 16, 16, 64, 1, 4096, False),
            Shape(8, 16, 4, 64, 1, 4096, False),
        ]
    shapes = []
    for seq in (1024, 2048, 4096, 8192):
        shapes += [Shape(2, 16, 16, 128, seq, seq, False), Shape(2, 16, 16, 128, seq, seq, True)]
    shapes += [Shape(2, 32, 8, 128, 4096, 4096, True), Shape(2, 32, 1, 128, 4096, 4096, True)]  # GQA, MQA
    shapes += [Shape(16, 32, kv, 128, 1, 8192, False) for kv in (32, 8, 1)]  # decode: MHA, GQA, MQA
    return shapes


def plan_attention(target: Target) -> list[Case]:
    dtype = primary_dtype(target)
    device = target.device
    cases = []
    for shape in _shapes(target):
        where = f"{shape.label()} {dtype}"
        impls: list[tuple[str, str, Callable[[Shape], Callable[..., Any]]]] = [
            ("einsum", "naive", _naive),
            ("dot_product_attention xla", "naive", lambda s: _dot_product_attention(s, "xla")),
        ]
        if device.is_nvidia_gpu and dtype in ("bf16", "fp16"):
            impls.append(("dot_product_attention cudnn", "flash", lambda s: _dot_product_attention(s, "cudnn")))
            if shape.q_len > 1:
                impls.append(("Pallas (Triton) flash", "flash", _pallas_gpu))
        if device.platform == "tpu" and shape.q_len > 1:
            impls.append(("Pallas (Mosaic) flash", "flash", _pallas_tpu))
        for label, implementation, build in impls:
            cases.append(
                Case("attention", f"{label} {where}", shape.op(implementation, dtype), _runner(build, shape, dtype))
            )
    return cases
