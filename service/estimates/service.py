"""Turn schema objects into roofline calls and roofline estimates into responses. No formulas here."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from enum import Enum
from typing import Annotated, Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy.orm import Session

import roofline
from schemas.common import ErrorDetail
from schemas.estimates import EstimateContext, Sweep
from schemas.hardware import HardwareCreate, HardwareSpec
from schemas.ops import (
    Activation,
    Attention,
    Chain,
    CrossEntropy,
    Elementwise,
    Embedding,
    LayerNorm,
    Matmul,
    Op,
    Reduction,
    RmsNorm,
    Rotary,
    Softmax,
)
from service import encoding
from service.catalogue import service as catalogue
from service.catalogue.loopread import DigestReader
from service.catalogue.service import HARDWARE, merge_patch
from service.errors import Unprocessable, details_from_validation, validation_message

BOUNDS = ("compute", "memory", "overhead")
MATMUL_FIELDS = ("tiles", "waves", "wave_efficiency")
MAX_ERRORS = 20
_CHAIN_INDEX = re.compile(r"^ops\[(\d+)\]: (.*)$", re.DOTALL)


def invalid(field: str, message: str, kind: str = "value_error") -> Unprocessable:
    """A 422 whose detail names the field, like the request-validation errors do."""
    detail = [ErrorDetail(field=field, message=message, type=kind)]
    return Unprocessable(validation_message(detail), detail)


def resolve_hardware(session: Session, ctx: EstimateContext) -> tuple[HardwareSpec, str]:
    """The profile an estimate runs on: a catalogue entry or an inline one, with the merge patch applied."""
    if isinstance(ctx.hardware, str):
        return _patched(catalogue.get_spec(session, HARDWARE, ctx.hardware), ctx.hardware, ctx)
    return _patched(ctx.hardware, ctx.hardware.slug, ctx)


async def resolve_hardware_on_loop(reader: DigestReader, ctx: EstimateContext) -> tuple[HardwareSpec, str] | None:
    """`resolve_hardware` without a session, where that needs no more than one digest read (`DigestReader`): an
    inline profile, or a catalogue profile whose parse is cached under the digest just read. None: ask
    `resolve_hardware`."""
    if not isinstance(ctx.hardware, str):
        return _patched(ctx.hardware, ctx.hardware.slug, ctx)
    spec = await catalogue.spec_on_loop(reader, HARDWARE, ctx.hardware)
    return None if spec is None else _patched(spec, ctx.hardware, ctx)


def _patched(spec: HardwareSpec, name: str, ctx: EstimateContext) -> tuple[HardwareSpec, str]:
    if ctx.hardware_patch:
        doc = merge_patch(spec.model_dump(mode="json", exclude_none=True), ctx.hardware_patch)
        doc.setdefault("slug", name)
        try:
            spec = HardwareCreate.model_validate(doc)
        except ValidationError as err:
            detail = details_from_validation(list(err.errors()), ("body", "hardware_patch"))
            raise Unprocessable(validation_message(detail), detail) from None
        name = f"{name} (patched)"
    return spec, name


# The core profiles of recent (profile, options) pairs: a catalogue profile's parse is cached per process
# (`catalogue.cached_spec`), so most requests ask again for the same one; building it costs ~7 µs of the hot path's
# budget (bench/throughput.py). Each entry holds its profile, so the id in the key cannot be reused while it is
# there; profiles and `roofline.Hardware` are never changed in place.
_CORE: dict[tuple[object, ...], tuple[HardwareSpec, roofline.Hardware]] = {}
_CORE_ENTRIES = 256


def to_core(spec: HardwareSpec, ctx: EstimateContext) -> roofline.Hardware:
    """The core's view of a profile with the request's options (efficiencies, launch overhead) applied."""
    o = ctx.options
    # Every option `_to_core` reads:
    key = (id(spec), o.launch_overhead_s, o.matmul_efficiency, o.vector_efficiency, o.memory_efficiency)
    hit = _CORE.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    hw = _to_core(spec, ctx)
    if len(_CORE) >= _CORE_ENTRIES:
        _CORE.clear()
    _CORE[key] = (spec, hw)
    return hw


def _to_core(spec: HardwareSpec, ctx: EstimateContext) -> roofline.Hardware:
    c, mem, o = spec.compute, spec.memory, ctx.options
    mu = c.matrix_unit
    return roofline.Hardware(
        name=spec.name,
        units=c.units,
        matrix_flops_per_s={str(k): v for k, v in c.matrix_flops_per_s.items()},
        vector_flops_per_s={str(k): v for k, v in c.vector_flops_per_s.items()},
        memory_bytes_per_s=float(mem.device.bandwidth_bytes_per_s or 0.0),
        memory_capacity_bytes=float(mem.device.capacity_bytes),
        launch_s=spec.overheads.kernel_launch_s if o.launch_overhead_s is None else o.launch_overhead_s,
        eff_matmul=o.matmul_efficiency or spec.efficiency.matmul,
        eff_vector=o.vector_efficiency or spec.efficiency.vector,
        eff_memory=o.memory_efficiency or spec.efficiency.memory,
        special_function_ops_per_s=c.special_function_ops_per_s,
        cache_bytes=float(mem.cache.capacity_bytes) if mem.cache else 0.0,
        cache_bandwidth_bytes_per_s=mem.cache.bandwidth_bytes_per_s if mem.cache else None,
        local_bytes_per_unit=float(mem.local.capacity_bytes) if mem.local else 0.0,
        tiles=tuple((t.m, t.n) for t in mu.tile_candidates) if mu else ((64, 64),),
        concurrent_tiles_per_unit=mu.concurrent_tiles_per_unit if mu else 1,
        alignment_bytes=mu.alignment_bytes if mu else 16,
        memory_latency_s=mem.device.latency_s,
        threads_per_unit=c.threads_per_unit,
        architecture=c.architecture,
    )


def kernels(hw: roofline.Hardware, op: Any, v: dict[str, Any]) -> list[roofline.Kernel]:
    """The kernels of a leaf op; `v` holds its numeric fields (scalars or arrays of a sweep)."""
    match op:
        case Matmul():
            return roofline.matmul(
                hw, v["m"], v["n"], v["k"], v["batch"], op.dtype, op.out_dtype, op.tile,
                tuple(str(e) for e in op.epilogue), op.fuse_epilogue,
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
                op.causal, str(op.implementation), op.dtype,
            )  # fmt: skip
    raise ValueError(f"unsupported op kind {getattr(op, 'kind', op)!r}")


def _numbers(op: Any) -> dict[str, Any]:
    return {name: getattr(op, name) for name in type(op).model_fields}


def _check_dtype(hw: roofline.Hardware, op: Any, where: str) -> None:
    """Ops on the matrix unit need a peak for their dtype (no fp8 on an A100): say so, naming the op's dtype."""
    if isinstance(op, Chain):
        for index, leaf in enumerate(op.ops):
            _check_dtype(hw, leaf, f"{where}.ops.{index}")
    elif isinstance(op, Matmul | Attention):
        try:
            hw.matrix_peak(str(op.dtype))
        except ValueError as err:
            raise invalid(f"{where}.dtype", str(err)) from None


def evaluate(
    hw: roofline.Hardware,
    op: Op,
    overrides: dict[str, Any] | None = None,
    where: str = "body.op",
    points: int | None = None,
) -> roofline.Estimate:
    """One op, or a grid of `points` of it when `overrides` holds arrays of that length, on one device; `where` is
    the op's field path in the request, for errors."""
    _check_dtype(hw, op, where)
    dtype = getattr(op, "dtype", "bf16")
    vector_peak = hw.vector_peak(str(dtype))
    try:
        if isinstance(op, Chain):
            parts = [kernels(hw, leaf, _numbers(leaf)) for leaf in op.ops]
            backward = None if op.backward is None else str(op.backward)
            return roofline.chain(parts, hw, op.fused, vector_peak, hw.launch_s, backward)
        leaf = kernels(hw, op, {**_numbers(op), **(overrides or {})})
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
            raise invalid(f"{where}.ops.{match.group(1)}", match.group(2)) from None
        raise invalid(where, str(err)) from None


def _capped(intensity: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
    """No bytes (a pure-math op): intensity ∞, which JSON cannot carry; 1e300 reads as "unbounded"."""
    if isinstance(intensity, float):
        return min(intensity, 1e300)
    out: NDArray[np.float64] = np.minimum(intensity, 1e300)
    return out


def _numbers_of(est: roofline.Estimate, details: bool = True) -> dict[str, Any]:
    """The numeric columns of a response item, then (`details`) the op's own figures, `details.`-prefixed."""
    columns = {
        "time_s": est.time_s,
        "flops": est.flops,
        "bytes": est.bytes,
        "arithmetic_intensity": _capped(est.arithmetic_intensity),
        "critical_intensity": est.critical_intensity,
        "compute_time_s": est.compute_s,
        "memory_time_s": est.memory_s,
        "overhead_s": est.overhead_s,
        "peak_flops_per_s": est.peak_flops_per_s,
    }
    if details:
        columns.update({f"details.{name}": values for name, values in est.extra.items()})
    return columns


def item_dict(est: roofline.Estimate) -> dict[str, Any]:
    """`item_dicts(est, where=None)[0]` for a single estimate, with Python's float() and math.isfinite() per number
    instead of numpy's matrix: a few µs where the column path costs ~50, which matters on /v1/estimate/op, the
    service's hot path (bench/throughput.py). tests/service/test_hot_path.py holds the two paths equal."""
    if not isinstance(est.time_s, float):
        return item_dicts(est, where=None)[0]
    top = {name: float(value) for name, value in _numbers_of(est, details=False).items()}
    extra = {name: float(value) for name, value in est.extra.items()}
    for name, value in top.items():
        if not math.isfinite(value):
            raise encoding.non_finite_error(f"response.{name}")
    peak, time_s, flops = top.pop("peak_flops_per_s"), top["time_s"], top["flops"]
    for name, value in extra.items():
        if not math.isfinite(value):
            raise encoding.non_finite_error(f"response.details.{name}")
    is_matmul = "tiles" in extra
    return {
        **top,
        "bound": BOUNDS[int(est.bound)],
        "unit": est.unit,
        "peak_flops_per_s": peak,
        "achieved_flops_per_s": flops / time_s if time_s > 0 else 0.0,
        "tiles": extra["tiles"] if is_matmul else None,
        "waves": extra["waves"] if is_matmul else None,
        "wave_efficiency": extra["wave_efficiency"] if is_matmul else None,
        "tile": [int(extra["tile_m"]), int(extra["tile_n"])] if is_matmul else None,
        "details": {name: value for name, value in extra.items() if name not in MATMUL_FIELDS},
        "assumptions": est.assumptions,
    }


def item_dicts(est: roofline.Estimate, where: str | None = "response.items") -> list[dict[str, Any]]:
    """One response item per point of an estimate, as plain dicts with exactly `EstimateRead`'s fields, in order.

    Every number goes into one (columns × points) float64 matrix, checked finite in one call and turned into Python
    floats in one `tolist()`, then zipped into rows: a 10 000-point sweep costs tens of milliseconds here, where
    constructing one pydantic model per point cost hundreds (bench/estimate_sweep.py), and a single estimate costs
    tens of microseconds, where a numpy call per column cost ~0.3 ms (bench/throughput.py). numpy stops here.
    A non-finite number is a 422 naming it: `where` names the items (None: one item, `response.<field>`).
    """
    shape = np.shape(est.time_s)
    size = int(np.prod(shape))
    numbers = _numbers_of(est)
    try:  # every column of one shape (a single estimate's 0-d numbers): one call, ~1 µs where a loop costs ~12
        matrix = np.array(list(numbers.values()), dtype=np.float64)
        if matrix.shape != (len(numbers), *shape):
            raise ValueError("columns of different shapes")
        matrix = matrix.reshape(len(numbers), size)
    except ValueError:  # a sweep's constant columns are 0-d beside its varied ones: broadcast each
        matrix = np.empty((len(numbers), size))
        for index, values in enumerate(numbers.values()):
            matrix[index] = values if np.ndim(values) == 0 else np.broadcast_to(values, shape).reshape(-1)
    bad = ~np.isfinite(matrix)
    if bad.any():  # JSON has no NaN or ∞: an encoder would write null where the schema promises a number
        column, point = np.unravel_index(int(np.argmax(bad)), bad.shape)
        name = list(numbers)[int(column)]
        raise encoding.non_finite_error(f"response.{name}" if where is None else f"{where}.{int(point)}.{name}")
    columns_in = dict(zip(numbers, matrix.tolist(), strict=True))
    extra = {name[len("details.") :]: values for name, values in columns_in.items() if name.startswith("details.")}
    time_s, flops = matrix[0], matrix[1]
    is_matmul = "tiles" in extra
    absent: list[Any] = [None] * size
    detail_names = [name for name in extra if name not in MATMUL_FIELDS]
    columns: dict[str, list[Any]] = {
        "time_s": columns_in["time_s"],
        "flops": columns_in["flops"],
        "bytes": columns_in["bytes"],
        "arithmetic_intensity": columns_in["arithmetic_intensity"],
        "critical_intensity": columns_in["critical_intensity"],
        "compute_time_s": columns_in["compute_time_s"],
        "memory_time_s": columns_in["memory_time_s"],
        "overhead_s": columns_in["overhead_s"],
        "bound": np.asarray(BOUNDS)[np.broadcast_to(est.bound, shape).ravel()].tolist(),
        "unit": [est.unit] * size,
        "peak_flops_per_s": columns_in["peak_flops_per_s"],
        "achieved_flops_per_s": np.divide(flops, time_s, out=np.zeros_like(time_s), where=time_s > 0).tolist(),
        "tiles": extra["tiles"] if is_matmul else absent,
        "waves": extra["waves"] if is_matmul else absent,
        "wave_efficiency": extra["wave_efficiency"] if is_matmul else absent,
        "tile": [[int(m), int(n)] for m, n in zip(extra["tile_m"], extra["tile_n"], strict=True)]
        if is_matmul
        else absent,
        "details": [
            dict(zip(detail_names, values, strict=True))
            for values in zip(*(extra[n] for n in detail_names), strict=True)
        ]
        if detail_names
        else [{} for _ in range(size)],
        "assumptions": [est.assumptions] * size,
    }
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def ops_json(items: list[dict[str, Any]], grid: dict[str, list[float]] | None = None) -> bytes:
    """The JSON of an `EstimateOpsRead`, serialised from plain dicts by orjson without building a model per item;
    tests/service/test_estimates_api.py checks that it validates as `EstimateOpsRead` and round-trips. The items'
    numbers were checked finite column by column (`item_dicts`): the encoder's own walk would cost more than the rest
    of a 10 000-point sweep's rendering."""
    return encoding.dumps({"items": items, "grid": grid}, check=False)


def with_assumptions(est: roofline.Estimate, hw: roofline.Hardware, hardware_name: str) -> roofline.Estimate:
    est.assumptions.update(
        {
            "hardware": hardware_name,
            "efficiency": {"matmul": hw.eff_matmul, "vector": hw.eff_vector, "memory": hw.eff_memory},
            "launch_overhead_s": hw.launch_s,
            "calibration": "none",
        }
    )
    return est


def _check_attention_grid(op: Attention, arrays: dict[str, Any]) -> None:
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
            raise invalid(
                f"body.sweep.vary.{preferred if preferred in arrays else other}",
                f"{rule} (point {i}: {name_a} {a[i]:g}, {name_b} {b[i]:g})",
            )


@functools.cache
def _column(model: type[BaseModel], name: str) -> TypeAdapter[list[Any]]:
    """Validates a list of values of one field of `model`, with that field's constraints."""
    info = model.model_fields[name]
    return TypeAdapter(list[Annotated[info.annotation, info]])  # type: ignore[name-defined]


def sweep(hw: roofline.Hardware, spec: Sweep) -> tuple[roofline.Estimate, dict[str, list[float]]]:
    """Evaluate the Cartesian grid of `spec.vary` in one vectorised call; the grid is in item order (the first
    varied field changes slowest, as in itertools.product)."""
    if isinstance(spec.op, Chain):
        raise invalid("body.sweep.op.kind", "chains cannot be swept; list them under `ops` instead")
    fields = _numbers(spec.op)
    for name in spec.vary:
        value = fields.get(name)
        if name == "kv_heads" and isinstance(spec.op, Attention):
            continue
        if name not in fields or not isinstance(value, int | float) or isinstance(value, bool):
            raise invalid(f"body.sweep.vary.{name}", f"not a numeric field of a {spec.op.kind} op")
    # Every varied value against the op schema's own bounds (Dim, Count, finite…), one column per call.
    for name, values in spec.vary.items():
        try:
            _column(type(spec.op), name).validate_python(values)
        except ValidationError as err:
            errors = list(err.errors())[:MAX_ERRORS]  # a 100 000-value column can fail everywhere: name the first
            detail = details_from_validation(errors, ("body", "sweep", "vary", name))
            raise Unprocessable(validation_message(detail), detail) from None
    names = list(spec.vary)
    mesh = np.meshgrid(*(np.asarray(spec.vary[n], dtype=np.float64) for n in names), indexing="ij")
    arrays = {n: m.ravel() for n, m in zip(names, mesh, strict=True)}
    if isinstance(spec.op, Attention):
        _check_attention_grid(spec.op, arrays)
    points = int(mesh[0].size)
    return evaluate(hw, spec.op, arrays, "body.sweep.op", points), {n: a.tolist() for n, a in arrays.items()}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool | Enum)


def _signature(op: Any) -> tuple[Any, ...]:
    """What ops must share to be evaluated in one vectorised call: the kind and every non-numeric field (dtype,
    tile, epilogue, flags). Numbers may differ; they become the arrays of the call. A chain stands alone."""
    if isinstance(op, Chain):
        return ("chain", id(op))
    fields = []
    for name in type(op).model_fields:
        value = getattr(op, name)
        if _is_number(value) or (name == "kv_heads" and isinstance(op, Attention)):
            continue
        fields.append((name, tuple(value) if isinstance(value, list) else value))
    return (type(op), *fields)


def estimate_ops(hw: roofline.Hardware, ops: list[Op], name: str) -> list[dict[str, Any]]:
    """The items of a list of ops, one estimate per op, in order (see `ops_json`).

    Ops of the same kind and settings are evaluated together, their numbers as arrays: a list of 10 000 matmuls costs
    one call of the core, not 10 000. An error names the first op of the group it comes from.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, op in enumerate(ops):
        groups.setdefault(_signature(op), []).append(index)
    items: list[dict[str, Any]] = [{}] * len(ops)
    for indices in groups.values():
        first = ops[indices[0]]
        where = f"body.ops.{indices[0]}"
        if len(indices) == 1 or isinstance(first, Chain):
            est = evaluate(hw, first, where=where)
        else:
            members = [ops[i] for i in indices]
            arrays: dict[str, Any] = {
                field: np.array([getattr(m, field) for m in members], dtype=np.float64)
                for field, value in _numbers(first).items()
                if _is_number(value)
            }
            if isinstance(first, Attention):
                heads = [(m.heads, m.kv_heads) for m in members if isinstance(m, Attention)]
                arrays["kv_heads"] = np.array([h if kv is None else kv for h, kv in heads], dtype=np.float64)
            est = evaluate(hw, first, arrays, where, len(indices))
        for index, row in zip(indices, item_dicts(with_assumptions(est, hw, name)), strict=True):
            items[index] = row
    return items


def calibrated(session: Session, ctx: EstimateContext, op: Op, est: roofline.Estimate) -> roofline.Estimate:
    """The estimate with `options.calibration` applied (service.calibrations): time_s calibrated, the raw time in
    details.raw_time_s, and assumptions.calibration saying which calibration and how it reached this op."""
    choice = ctx.options.calibration
    if choice == "none":
        return est
    from service.calibrations.service import for_estimate  # the calibrations import this module's functions

    hardware = ctx.hardware if isinstance(ctx.hardware, str) and not ctx.hardware_patch else None
    doc = op.model_dump(mode="json")
    times, info, _ = for_estimate(session, hardware, choice, [doc], est.time_s, est.overhead_s)
    est.assumptions["calibration"] = info
    if times is None:
        return est
    extra = {**est.extra, "raw_time_s": np.asarray(est.time_s, dtype=np.float64)}
    return dataclasses.replace(est, time_s=times.reshape(np.shape(est.time_s)), extra=extra)


def calibrated_items(
    session: Session, ctx: EstimateContext, docs: list[dict[str, Any]], items: list[dict[str, Any]]
) -> None:
    """`options.calibration` on rendered items of /v1/estimate/ops (`docs`: each item's op as JSON), in place."""
    if ctx.options.calibration == "none":
        return
    from service.calibrations.service import calibrate_items

    hardware = ctx.hardware if isinstance(ctx.hardware, str) and not ctx.hardware_patch else None
    calibrate_items(session, hardware, ctx.options.calibration, docs, items)


def sweep_docs(spec: Sweep, grid: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The op of every point of a sweep, as JSON (for calibration)."""
    base = spec.op.model_dump(mode="json")
    names = list(grid)
    return [{**base, **dict(zip(names, values, strict=True))} for values in zip(*grid.values(), strict=True)]
