"""Predictions for many measured ops at once, through the estimate service's own functions (no formulas here).

Results that differ only in their sizes share a template (kind, dtype, flags); each template is one vectorised
`service.estimates.service.evaluate` call over arrays of its sizes, so 10 000 GEMMs cost one core call.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

import roofline
from schemas.benchmarks import Collective, TimingScope
from schemas.estimates import EstimateContext, Options
from schemas.hardware import HardwareSpec
from schemas.ops import Chain
from service.collectives import service as collectives
from service.estimates import service as estimates

# Kernel-time scopes (profiler sums, graph replays) have no host launch in them: their per-kernel fixed cost is
# the shortest kernel the device runs, 2.5 µs on an A100 (aiconfigurator's 1×32×32 GEMM: bench/validate.py's
# KERNEL_FLOOR_S), never more than the profile's launch cost. Wall-clock numbers keep the profile's kernel_launch_s.
KERNEL_FLOOR_S = 2.5e-6


def launch_s(spec: HardwareSpec, scope: TimingScope) -> float:
    """The per-kernel fixed cost a prediction in this timing scope uses."""
    if scope is TimingScope.wall_clock:
        return spec.overheads.kernel_launch_s
    return min(spec.overheads.kernel_launch_s, KERNEL_FLOOR_S)


def core_hardware(spec: HardwareSpec, slug: str, scope: TimingScope) -> roofline.Hardware:
    ctx = EstimateContext(hardware=slug, options=Options(launch_overhead_s=launch_s(spec, scope)))
    return estimates.to_core(spec, ctx)


@dataclass
class Predictions:
    """One element per result; NaN where there is no prediction (collectives)."""

    time_s: NDArray[np.float64]
    overhead_s: NDArray[np.float64]
    flops: NDArray[np.float64]
    bytes: NDArray[np.float64]

    @classmethod
    def empty(cls, n: int) -> Predictions:
        return cls(*(np.full(n, np.nan) for _ in range(4)))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numeric_annotation(annotation: Any) -> bool:
    """int or float, or an optional one (attention's kv_heads); bool is not a size."""
    if annotation in (int, float):
        return True
    args = get_args(annotation)
    return bool(args) and all(a in (int, float, type(None)) for a in args) and type(None) in args


@functools.cache
def size_fields(cls: type[BaseModel]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """A leaf op class's size fields (always numbers), optional size fields (a number or unset) and the rest."""
    sizes, optional, others = [], [], []
    for name, info in cls.model_fields.items():
        if info.annotation in (int, float):
            sizes.append(name)
        elif _numeric_annotation(info.annotation):
            optional.append(name)
        else:
            others.append(name)
    return tuple(sizes), tuple(optional), tuple(others)


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@functools.cache
def _key_parts(cls: type[BaseModel]) -> tuple[Callable[[dict[str, Any]], tuple[Any, ...]], tuple[str, ...]]:
    """A getter of a class's non-size fields as a hashable tuple (one C call for the scalars, lists such as a
    matmul's epilogue as tuples), and the class's optional size fields."""
    _, optional, others = size_fields(cls)
    lists = tuple(name for name in others if get_origin(cls.model_fields[name].annotation) is list)
    scalars = (*(name for name in others if name not in lists), "kind")  # two names or more: itemgetter → tuple
    getter = operator.itemgetter(*scalars)
    if not lists:
        return getter, optional

    def get(values: dict[str, Any]) -> tuple[Any, ...]:
        return (*getter(values), *(tuple(values[name]) for name in lists))

    return get, optional


def template_key(op: BaseModel) -> tuple[Any, ...]:
    """What must be equal for two ops to share one vectorised call: the kind, every non-size field, and which
    optional size fields are unset (attention's kv_heads)."""
    getter, optional = _key_parts(type(op))
    values = op.__dict__
    return (type(op), getter(values), *(values[name] is None for name in optional))


def numeric_fields(op: BaseModel) -> list[str]:
    sizes, optional, _ = size_fields(type(op))
    return [*sizes, *(name for name in optional if getattr(op, name) is not None)]


def predict(
    hw: roofline.Hardware, ops: list[Any], where: str = "body.results", spec: HardwareSpec | None = None
) -> Predictions:
    """Predicted seconds, fixed-cost seconds, FLOPs and bytes of every op on `hw` (whose launch cost is the timing
    scope's); `where` names the list in errors (`body.results.17.op.dtype`). Collectives are predicted on `spec`'s
    own fabric (service.collectives), when it is given and the devices fit it; otherwise they stay NaN."""
    out = Predictions.empty(len(ops))
    groups: dict[tuple[Any, ...], list[int]] = {}
    by_collective: dict[tuple[str, int], list[int]] = {}
    for index, op in enumerate(ops):
        if isinstance(op, Collective):
            by_collective.setdefault((str(op.collective), op.devices), []).append(index)
            continue
        if isinstance(op, Chain):
            _store(out, [index], estimates.evaluate(hw, op, where=f"{where}.{index}.op"))
            continue
        groups.setdefault(template_key(op), []).append(index)
    for indices in groups.values():
        first = ops[indices[0]]
        names = numeric_fields(first)
        overrides = {name: np.array([getattr(ops[i], name) for i in indices], dtype=np.float64) for name in names}
        est = estimates.evaluate(hw, first, overrides, where=f"{where}.{indices[0]}.op", points=len(indices))
        _store(out, indices, est)
    if spec is not None:
        for (kind, devices), indices in by_collective.items():
            _collectives(out, spec, kind, devices, indices, [ops[i].bytes for i in indices])
    return out


def _collectives(
    out: Predictions, spec: HardwareSpec, kind: str, devices: int, indices: list[int], sizes: list[int]
) -> None:
    """One vectorised collective estimate per (collective, device count), on the profile's own fabric. A count the
    profile's fabric cannot hold (more than its domain, no scale-out) has no prediction: the measurement stands."""
    try:
        topology = collectives.device_topology(spec, devices)
        est = roofline.collective(kind, np.asarray(sizes, dtype=np.float64), topology)
    except ValueError:
        return
    idx = np.asarray(indices)
    out.time_s[idx] = est.time_s
    out.overhead_s[idx] = 0.0  # a collective's latency term is part of what calibration may learn
    out.bytes[idx] = np.asarray(sizes, dtype=np.float64)


def _store(out: Predictions, indices: list[int], est: roofline.Estimate) -> None:
    n = len(indices)
    idx = np.asarray(indices)
    out.time_s[idx] = np.broadcast_to(est.time_s, (n,))
    out.overhead_s[idx] = np.broadcast_to(est.overhead_s, (n,))
    out.flops[idx] = np.broadcast_to(est.flops, (n,))
    out.bytes[idx] = np.broadcast_to(est.bytes, (n,))
