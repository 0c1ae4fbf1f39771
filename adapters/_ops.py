"""Ops (`schemas.ops`) as calls of the core: a leaf op's kernels, one op or a grid of it evaluated on a device."""

from __future__ import annotations

import functools
import re
from enum import Enum
from typing import Any, get_args

import numpy as np

import roofline
from adapters._errors import InvalidField
from schemas.common import InputModel
from schemas.ops import (
    Activation,
    Attention,
    Chain,
    CrossEntropy,
    Elementwise,
    Embedding,
    LayerNorm,
    Matmul,
    MoeLayer,
    Op,
    Reduction,
    RmsNorm,
    Rotary,
    Softmax,
)

_CHAIN_INDEX = re.compile(r"^ops\[(\d+)\]: (.*)$", re.DOTALL)


def kernels(hw: roofline.Hardware, op: Any, v: dict[str, Any]) -> list[roofline.Kernel]:
    """The kernels of a leaf op; `v` holds its numeric fields (scalars or arrays of a sweep)."""
    match op:
        case Matmul():
            return roofline.matmul(
                hw, v["m"], v["n"], v["k"], v["batch"], op.dtype, op.out_dtype, op.tile,
                tuple(str(e) for e in op.epilogue), op.fuse_epilogue, str(op.precision), str(op.quantization),
            )  # fmt: skip
        case Elementwise():
            return roofline.elementwise(
                hw, v["elements"], v["inputs"], v["outputs"], v["flops_per_element"],
                v["transcendentals_per_element"], op.dtype, v["chained_inputs"], str(op.memory_access),
                tuple(str(fn) for fn in op.functions),
            )  # fmt: skip
        case Activation():
            return roofline.activation(hw, v["elements"], str(op.function), op.dtype, str(op.memory_access))
        case Reduction():
            return roofline.reduction(hw, v["rows"], v["cols"], op.dtype, str(op.memory_access))
        case Softmax():
            return roofline.softmax(hw, v["rows"], v["cols"], op.dtype, op.online, str(op.memory_access))
        case LayerNorm():
            return roofline.layernorm(hw, v["rows"], v["cols"], op.dtype, access=str(op.memory_access))
        case RmsNorm():
            return roofline.layernorm(hw, v["rows"], v["cols"], op.dtype, rms=True, access=str(op.memory_access))
        case Rotary():
            return roofline.rotary(hw, v["tokens"], v["heads"], v["head_dim"], op.dtype, str(op.memory_access))
        case Embedding():
            return roofline.embedding(hw, v["tokens"], v["hidden"], v["vocab"], op.dtype, str(op.memory_access))
        case CrossEntropy():
            return roofline.cross_entropy(hw, v["tokens"], v["vocab"], op.dtype, str(op.memory_access))
        case Attention():
            return roofline.attention(
                hw, v["batch"], v["heads"], v["heads"] if v["kv_heads"] is None else v["kv_heads"], v["head_dim"],
                v["q_len"], v["kv_len"],
                op.causal, str(op.implementation), op.dtype, op.window,
            )  # fmt: skip
        case MoeLayer():
            return roofline.moe(
                hw, v["tokens"], v["hidden"], v["inter"], v["top_k"], v["experts"], v["tensor"], v["expert"],
                op.gated, op.dtype, str(op.quantization), str(op.routing), v["alpha"],
            )  # fmt: skip
    raise ValueError(f"unsupported op kind {getattr(op, 'kind', op)!r}")


def fields_of(op: Any) -> dict[str, Any]:
    """Every field of an op, by name (what `kernels` reads its numbers from)."""
    return {name: getattr(op, name) for name in type(op).model_fields}


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool | Enum)


def _numeric_annotation(annotation: Any) -> bool:
    """int or float, or an optional one (`int | None`); bool is not a size. A constrained optional (`Dim | None`:
    attention's kv_heads, which picks the kernel) is not one either: it is part of the op's variant."""
    if annotation in (int, float):
        return True
    args = get_args(annotation)
    return bool(args) and all(a in (int, float, type(None)) for a in args) and type(None) in args


@functools.cache
def size_fields(cls: type[InputModel]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """An op class's size fields (always numbers), optional size fields (a number or unset) and the rest."""
    sizes, optional, others = [], [], []
    for name, info in cls.model_fields.items():
        if info.annotation in (int, float):
            sizes.append(name)
        elif _numeric_annotation(info.annotation):
            optional.append(name)
        else:
            others.append(name)
    return tuple(sizes), tuple(optional), tuple(others)


def _check_dtype(hw: roofline.Hardware, op: Any, where: str) -> None:
    """Ops on the matrix unit need a peak for their dtype (no fp8 on an A100): say so, naming the op's dtype (or the
    matmul's precision, when its fp32 inputs ask for a rate the device lacks: tf32 on a V100)."""
    if isinstance(op, Chain):
        for index, leaf in enumerate(op.ops):
            _check_dtype(hw, leaf, f"{where}.ops.{index}")
    elif isinstance(op, Matmul):
        try:
            hw.matrix_peak(str(op.dtype))
        except ValueError as err:
            raise InvalidField(f"{where}.dtype", str(err)) from None
        if op.quantization != "none":
            try:
                hw.matrix_peak(roofline.QUANTIZATIONS[str(op.quantization)].dtype)
            except ValueError as err:
                raise InvalidField(f"{where}.quantization", str(err)) from None
        try:
            roofline.matmul_rate(hw, str(op.dtype), str(op.precision))
        except ValueError as err:
            raise InvalidField(f"{where}.precision", str(err)) from None
    elif isinstance(op, Attention):
        try:
            hw.matrix_peak(str(op.dtype))
        except ValueError as err:
            raise InvalidField(f"{where}.dtype", str(err)) from None
    elif isinstance(op, MoeLayer):
        narrow = str(op.dtype) if op.quantization == "none" else roofline.QUANTIZATIONS[str(op.quantization)].dtype
        try:
            hw.matrix_peak(narrow)
        except ValueError as err:
            raise InvalidField(
                f"{where}.{'dtype' if op.quantization == 'none' else 'quantization'}", str(err)
            ) from None


def evaluate(
    hw: roofline.Hardware,
    op: Op,
    overrides: dict[str, Any] | None = None,
    where: str = "body.op",
    points: int | None = None,
) -> roofline.Estimate:
    """One op, or a grid of `points` of it when `overrides` holds arrays of that length, on one device; `where` is
    the op's field path in the request, for errors (`InvalidField`)."""
    _check_dtype(hw, op, where)
    # Framework kernels compute 16-bit elementwise math in fp32 (PyTorch's opmath_type: ATen/OpMathType.h; XLA's GPU
    # backend upcasts bf16, `roofline.ops.alu_cost`), attention's softmax works on fp32 scores, and the memory-bound
    # kernels declare the fp32 peak: the fp32 vector rate, not a profile's packed 16-bit one.
    vector_peak = hw.vector_peak("fp32")
    if isinstance(op, Chain):
        for index, member in enumerate(op.ops):
            if isinstance(member, Matmul) and member.quantization != "none":
                raise InvalidField(
                    f"{where}.ops.{index}.quantization",
                    "a quantised matmul runs its own quantise kernels before the product and cannot be fused into "
                    "a chain: list it as an op of its own",
                )
    try:
        if isinstance(op, Chain):
            parts = [kernels(hw, leaf, fields_of(leaf)) for leaf in op.ops]
            backward = None if op.backward is None else str(op.backward)
            return roofline.chain(parts, hw, op.fused, vector_peak, hw.launch_s, backward)
        leaf = kernels(hw, op, {**fields_of(op), **(overrides or {})})
        if points is not None:
            # The core sizes its result by the kernels' FLOPs and outputs: a varied field that moves only input
            # bytes (attention's kv_heads, elementwise inputs) or nothing (embedding's vocab) must still give
            # one item per grid point.
            for kernel in leaf:
                kernel.flops = kernel.flops + np.zeros(points)
        return roofline.single(leaf, hw, vector_peak, hw.launch_s)
    except ValueError as err:
        match = _CHAIN_INDEX.match(str(err))
        if match:  # the core names the chain position that failed: ops[i]
            raise InvalidField(f"{where}.ops.{match.group(1)}", match.group(2)) from None
        raise InvalidField(where, str(err)) from None


def check_sweep(op: Op, vary: dict[str, list[float]], where: str = "body.sweep") -> None:
    """A sweep varies numeric fields of a leaf op (attention's kv_heads too, which may be unset)."""
    if isinstance(op, Chain):
        raise InvalidField(f"{where}.op.kind", "chains cannot be swept; list them under `ops` instead")
    fields = fields_of(op)
    for name in vary:
        value = fields.get(name)
        if name == "kv_heads" and isinstance(op, Attention):
            continue
        if name not in fields or not isinstance(value, int | float) or isinstance(value, bool):
            raise InvalidField(f"{where}.vary.{name}", f"not a numeric field of a {op.kind} op")


def _check_attention_grid(op: Attention, arrays: dict[str, Any], where: str) -> None:
    """The cross-field rules of an attention op, on every point of the grid (each value alone was validated)."""
    heads = np.asarray(arrays.get("heads", op.heads))
    kv_heads = np.asarray(arrays.get("kv_heads", heads if op.kv_heads is None else op.kv_heads))
    q_len, kv_len = np.asarray(arrays.get("q_len", op.q_len)), np.asarray(arrays.get("kv_len", op.kv_len))
    heads, kv_heads, q_len, kv_len = np.broadcast_arrays(heads, kv_heads, q_len, kv_len)
    rules = [
        ((kv_heads > heads) | (np.mod(heads, kv_heads) != 0), "kv_heads", "heads", "kv_heads must divide heads",
         ("heads", heads), ("kv_heads", kv_heads)),
        (q_len > kv_len, "kv_len", "q_len", "kv_len must be at least q_len", ("q_len", q_len), ("kv_len", kv_len)),
    ]  # fmt: skip
    for bad, preferred, other, rule, (name_a, a), (name_b, b) in rules:
        if np.any(bad):
            i = int(np.argmax(bad))
            raise InvalidField(
                f"{where}.vary.{preferred if preferred in arrays else other}",
                f"{rule} (point {i}: {name_a} {a[i]:g}, {name_b} {b[i]:g})",
            )


def _check_moe_grid(op: MoeLayer, arrays: dict[str, Any], where: str) -> None:
    """A MoE op's cross-field rules on every point of a grid: top_k ≤ experts, expert parallelism divides experts."""
    top_k, experts = np.asarray(arrays.get("top_k", op.top_k)), np.asarray(arrays.get("experts", op.experts))
    expert = np.asarray(arrays.get("expert", op.expert))
    top_k, experts, expert = np.broadcast_arrays(top_k, experts, expert)
    for bad, names, rule in (
        (top_k > experts, ("top_k", "experts"), "experts must be at least top_k"),
        (np.mod(experts, expert) != 0, ("expert", "experts"), "expert parallelism must divide experts"),
    ):
        if np.any(bad):
            i = int(np.argmax(bad))
            name = next((n for n in names if n in arrays), names[0])
            raise InvalidField(f"{where}.vary.{name}", f"{rule} (point {i}: top_k {top_k[i]:g}, experts "
                               f"{experts[i]:g}, expert {expert[i]:g})")  # fmt: skip


def sweep(
    hw: roofline.Hardware, op: Op, vary: dict[str, list[float]], where: str = "body.sweep"
) -> tuple[roofline.Estimate, dict[str, list[float]]]:
    """Evaluate the Cartesian grid of `vary` (values checked by `check_sweep` and the op's own field bounds) in one
    vectorised call; the grid is in item order (the first varied field changes slowest, as in itertools.product)."""
    check_sweep(op, vary, where)
    names = list(vary)
    mesh = np.meshgrid(*(np.asarray(vary[n], dtype=np.float64) for n in names), indexing="ij")
    arrays = {n: m.ravel() for n, m in zip(names, mesh, strict=True)}
    if isinstance(op, Attention):
        _check_attention_grid(op, arrays, where)
    if isinstance(op, MoeLayer):
        _check_moe_grid(op, arrays, where)
    points = int(mesh[0].size)
    return evaluate(hw, op, arrays, f"{where}.op", points), {n: a.tolist() for n, a in arrays.items()}


def sweep_docs(op: Op, grid: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The op of every point of a sweep, as JSON (what a calibration describes)."""
    base = op.model_dump(mode="json")
    names = list(grid)
    return [{**base, **dict(zip(names, values, strict=True))} for values in zip(*grid.values(), strict=True)]
