"""Turn schema objects into roofline calls and roofline estimates into responses. No formulas here."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy.orm import Session

import roofline
from schemas.estimates import EstimateContext, EstimateOpsRead, EstimateRead, Sweep
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
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE, merge_patch
from service.errors import Unprocessable, details_from_validation, validation_message

BOUNDS = ("compute", "memory", "overhead")


def resolve_hardware(session: Session, ctx: EstimateContext) -> tuple[HardwareSpec, str]:
    """The profile an estimate runs on: a catalogue entry or an inline one, with the merge patch applied."""
    if isinstance(ctx.hardware, str):
        spec: HardwareSpec = catalogue.get_spec(session, HARDWARE, ctx.hardware)
        name = ctx.hardware
    else:
        spec, name = ctx.hardware, ctx.hardware.slug
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


def to_core(spec: HardwareSpec, ctx: EstimateContext) -> roofline.Hardware:
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
        local_bytes_per_unit=float(mem.local.capacity_bytes) if mem.local else 0.0,
        tiles=tuple((t.m, t.n) for t in mu.tile_candidates) if mu else ((64, 64),),
        concurrent_tiles_per_unit=mu.concurrent_tiles_per_unit if mu else 1,
        alignment_bytes=mu.alignment_bytes if mu else 16,
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
                v["transcendentals_per_element"], op.dtype, v["chained_inputs"],
            )  # fmt: skip
        case Activation():
            return roofline.activation(hw, v["elements"], str(op.function), op.dtype)
        case Reduction():
            return roofline.reduction(hw, v["rows"], v["cols"], op.dtype)
        case Softmax():
            return roofline.softmax(hw, v["rows"], v["cols"], op.dtype, op.online)
        case LayerNorm():
            return roofline.layernorm(hw, v["rows"], v["cols"], op.dtype)
        case RmsNorm():
            return roofline.layernorm(hw, v["rows"], v["cols"], op.dtype, rms=True)
        case Rotary():
            return roofline.rotary(hw, v["tokens"], v["heads"], v["head_dim"], op.dtype)
        case Embedding():
            return roofline.embedding(hw, v["tokens"], v["hidden"], v["vocab"], op.dtype)
        case CrossEntropy():
            return roofline.cross_entropy(hw, v["tokens"], v["vocab"], op.dtype)
        case Attention():
            return roofline.attention(
                hw, v["batch"], v["heads"], v["kv_heads"] or v["heads"], v["head_dim"], v["q_len"], v["kv_len"],
                op.causal, str(op.implementation), op.dtype,
            )  # fmt: skip
    raise ValueError(f"unsupported op kind {getattr(op, 'kind', op)!r}")


def _numbers(op: Any) -> dict[str, Any]:
    return {name: getattr(op, name) for name in type(op).model_fields}


def evaluate(hw: roofline.Hardware, op: Op, overrides: dict[str, Any] | None = None) -> roofline.Estimate:
    """One op (or a whole grid of it, when `overrides` holds arrays) on one device."""
    dtype = getattr(op, "dtype", "bf16")
    vector_peak = hw.vector_peak(str(dtype))
    try:
        if isinstance(op, Chain):
            parts = [kernels(hw, leaf, _numbers(leaf)) for leaf in op.ops]
            return roofline.chain(parts, hw, op.fused, vector_peak, hw.launch_s)
        return roofline.single(kernels(hw, op, {**_numbers(op), **(overrides or {})}), hw, vector_peak, hw.launch_s)
    except ValueError as err:
        raise Unprocessable(f"body.op: {err}") from None


def rows(est: roofline.Estimate) -> list[EstimateRead]:
    """One response item per point of an estimate."""
    shape = np.shape(est.time_s)
    flat = {
        "time_s": est.time_s, "flops": est.flops, "bytes": est.bytes, "intensity": est.arithmetic_intensity,
        "critical": est.critical_intensity, "compute": est.compute_s, "memory": est.memory_s,
        "overhead": est.overhead_s, "peak": est.peak_flops_per_s,
    }  # fmt: skip
    cols = {k: np.broadcast_to(v, shape).ravel().tolist() for k, v in flat.items()}
    bound = np.broadcast_to(est.bound, shape).ravel().tolist()
    extra = {k: np.broadcast_to(v, shape).ravel().tolist() for k, v in est.extra.items()}
    is_matmul = "tiles" in extra
    out = []
    for i in range(len(cols["time_s"])):
        details = {k: v[i] for k, v in extra.items() if k not in ("tiles", "waves", "wave_efficiency")}
        t = cols["time_s"][i]
        out.append(
            EstimateRead(
                time_s=t,
                flops=cols["flops"][i],
                bytes=cols["bytes"][i],
                arithmetic_intensity=min(cols["intensity"][i], 1e300),
                critical_intensity=cols["critical"][i],
                compute_time_s=cols["compute"][i],
                memory_time_s=cols["memory"][i],
                overhead_s=cols["overhead"][i],
                bound=BOUNDS[bound[i]],
                unit=est.unit,
                peak_flops_per_s=cols["peak"][i],
                achieved_flops_per_s=cols["flops"][i] / t if t > 0 else 0.0,
                tiles=extra["tiles"][i] if is_matmul else None,
                waves=extra["waves"][i] if is_matmul else None,
                wave_efficiency=extra["wave_efficiency"][i] if is_matmul else None,
                tile=[int(extra["tile_m"][i]), int(extra["tile_n"][i])] if is_matmul else None,
                details=details,
                assumptions=est.assumptions,
            )
        )
    return out


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


def sweep(hw: roofline.Hardware, spec: Sweep) -> tuple[roofline.Estimate, dict[str, list[float]]]:
    """Evaluate the Cartesian grid of `spec.vary` in one vectorised call."""
    if isinstance(spec.op, Chain):
        raise Unprocessable("body.sweep.op: chains cannot be swept; list them under `ops` instead")
    fields = _numbers(spec.op)
    for name in spec.vary:
        value = fields.get(name)
        if name == "kv_heads" and isinstance(spec.op, Attention):
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise Unprocessable(f"body.sweep.vary.{name}: not a numeric field of a {spec.op.kind} op")
    names = list(spec.vary)
    grid = list(itertools.product(*(spec.vary[n] for n in names)))
    columns = {n: [p[i] for p in grid] for i, n in enumerate(names)}
    # Validate every varied value through the op schema's own bounds, one column at a time.
    for n in names:
        for value in sorted(set(columns[n])):
            try:
                type(spec.op).model_validate({**spec.op.model_dump(), n: value})
            except ValidationError as err:
                detail = details_from_validation(list(err.errors()), ("body", "sweep", "vary"))
                raise Unprocessable(validation_message(detail), detail) from None
    arrays = {n: np.asarray(columns[n], dtype=np.float64) for n in names}
    return evaluate(hw, spec.op, arrays), columns


def estimate_ops(hw: roofline.Hardware, ops: list[Op], name: str) -> EstimateOpsRead:
    items: list[EstimateRead] = []
    for index, op in enumerate(ops):
        try:
            items.extend(rows(with_assumptions(evaluate(hw, op), hw, name)))
        except Unprocessable as err:
            raise Unprocessable(err.message.replace("body.op", f"body.ops.{index}")) from None
    return EstimateOpsRead(items=items)
