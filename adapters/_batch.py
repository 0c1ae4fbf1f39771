"""The one vectorised batch evaluator: many ops on one device, for op estimates (`POST /v1/estimate/ops`), the
predictions stored beside measured results and the calibrations fitted on them alike.

Ops that differ only in their sizes share a template (kind, dtype, flags); each template is one `evaluate` call of
the core over arrays of its sizes, so 10 000 GEMMs cost one call. A chain stands alone. Measured collectives are
estimated on the profile's own fabric, one vectorised call per (collective, device count). A measured training
step is predicted by the training core (`training_step_run`, `roofline.estimate_training`), one step each.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_origin

import numpy as np
from numpy.typing import NDArray

import roofline
from adapters._collectives import device_topology
from adapters._hardware import scoped_core
from adapters._ops import evaluate, size_fields
from schemas.benchmarks import Collective, TimingScope, TrainingStep
from schemas.common import InputModel
from schemas.hardware import HardwareSpec
from schemas.ops import Chain


@functools.cache
def _key_parts(cls: type[InputModel]) -> tuple[Callable[[dict[str, Any]], tuple[Any, ...]], tuple[str, ...]]:
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


def template_key(op: InputModel) -> tuple[Any, ...]:
    """What must be equal for two ops to share one vectorised call: the kind, every non-size field (attention's
    kv_heads among them), and which optional size fields are unset."""
    getter, optional = _key_parts(type(op))
    values = op.__dict__
    return (type(op), getter(values), *(values[name] is None for name in optional))


def numeric_fields(op: InputModel) -> list[str]:
    """The fields a group of ops of one template evaluates as arrays: its sizes, and the optional ones it sets."""
    sizes, optional, _ = size_fields(type(op))
    return [*sizes, *(name for name in optional if getattr(op, name) is not None)]


@dataclass
class OpGroup:
    """Ops of one template, evaluated in one call: `estimate`'s numbers have one element per op of `indices` (a chain:
    one op, its numbers scalars)."""

    indices: list[int]
    template: Any  # the first op of the group
    estimate: roofline.Estimate


@dataclass
class CollectiveGroup:
    """Measured collectives of one kind over one device count, estimated together on the profile's fabric."""

    indices: list[int]
    bytes: NDArray[np.float64]
    estimate: roofline.CollectiveEstimate


@dataclass
class Batch:
    """A list of ops evaluated: every op is in exactly one group, or (a collective the profile cannot hold, a
    training step it cannot run) none."""

    size: int
    groups: list[OpGroup] = field(default_factory=list)
    collectives: list[CollectiveGroup] = field(default_factory=list)
    training: dict[int, roofline.TrainingEstimate] = field(default_factory=dict)


def training_step_run(hw: roofline.Hardware, op: TrainingStep) -> roofline.TrainingRun:
    """The core's step for a measured one (`schemas.benchmarks.TrainingStep`) on one device: the worker's small
    transformer (pre-norm layer norms without biases, learned positions, multi-head attention written out as products
    and a softmax, a GELU FFN, an untied LM head), one micro-batch, AdamW, no recomputation."""
    model = roofline.Transformer(
        layers=op.layers, hidden=op.hidden, heads=op.heads, kv_heads=op.heads, head_dim=op.hidden // op.heads,
        ffn=op.ffn, gated=False, activation="gelu", vocab=op.vocab, tied_embeddings=False,
        position_table=op.sequence, bias=False,
    )  # fmt: skip
    return roofline.TrainingRun(
        model, roofline.System(hw, None), sequence=op.sequence, micro_batch=op.batch, global_batch=op.batch,
        precision=roofline.TrainingPrecision(compute=op.dtype), attention="naive",
    )  # fmt: skip


def evaluate_ops(
    hw: roofline.Hardware,
    ops: Sequence[Any],
    where: Callable[[int], str] = lambda index: f"body.ops.{index}",
    spec: HardwareSpec | None = None,
) -> Batch:
    """Every op of a list on `hw`, grouped by template; `where(i)` is op i's field path in the request, for errors (an
    error names the first op of its group). Collectives (`schemas.benchmarks.Collective`) are estimated on `spec`'s
    own fabric, when it is given and the devices fit it; otherwise they are left out."""
    batch = Batch(len(ops))
    groups: dict[tuple[Any, ...], list[int]] = {}
    by_collective: dict[tuple[str, int], list[int]] = {}
    for index, op in enumerate(ops):
        if isinstance(op, Collective):
            by_collective.setdefault((str(op.collective), op.devices), []).append(index)
        elif isinstance(op, TrainingStep):
            try:  # a dtype the profile has no peak for: no prediction, as for a collective it cannot hold
                batch.training[index] = roofline.estimate_training(training_step_run(hw, op))
            except roofline.TrainingConfigError:
                continue
        else:
            groups.setdefault(("chain", index) if isinstance(op, Chain) else template_key(op), []).append(index)
    for indices in groups.values():  # in the order of their first op: the first error in the list is the one named
        first = ops[indices[0]]
        if isinstance(first, Chain):
            batch.groups.append(OpGroup(indices, first, evaluate(hw, first, where=where(indices[0]))))
            continue
        names = numeric_fields(first)
        overrides = {name: np.array([getattr(ops[i], name) for i in indices], dtype=np.float64) for name in names}
        est = evaluate(hw, first, overrides, where=where(indices[0]), points=len(indices))
        batch.groups.append(OpGroup(indices, first, est))
    if spec is not None:
        for (kind, devices), indices in by_collective.items():
            sizes = np.asarray([ops[i].bytes for i in indices], dtype=np.float64)
            try:  # a count the profile's fabric cannot hold (more than its domain, no scale-out): no prediction
                topology = device_topology(spec, devices)
                est_c = roofline.collective(kind, sizes, topology)
            except ValueError:
                continue
            batch.collectives.append(CollectiveGroup(indices, sizes, est_c))
    return batch


@dataclass
class Predictions:
    """One element per op; NaN where there is no prediction (a collective the profile cannot hold)."""

    time_s: NDArray[np.float64]
    overhead_s: NDArray[np.float64]
    flops: NDArray[np.float64]
    bytes: NDArray[np.float64]

    @classmethod
    def of(cls, batch: Batch) -> Predictions:
        """Predicted seconds, fixed-cost seconds, FLOPs and bytes of every op of a batch, in list order."""
        out = cls(*(np.full(batch.size, np.nan) for _ in range(4)))
        for group in batch.groups:
            n, idx, est = len(group.indices), np.asarray(group.indices), group.estimate
            out.time_s[idx] = np.broadcast_to(est.time_s, (n,))
            out.overhead_s[idx] = np.broadcast_to(est.overhead_s, (n,))
            out.flops[idx] = np.broadcast_to(est.flops, (n,))
            out.bytes[idx] = np.broadcast_to(est.bytes, (n,))
        for coll in batch.collectives:
            idx = np.asarray(coll.indices)
            out.time_s[idx] = coll.estimate.time_s
            out.overhead_s[idx] = 0.0  # a collective's latency term is part of what calibration may learn
            out.bytes[idx] = coll.bytes
        for index, step in batch.training.items():
            out.time_s[index], out.overhead_s[index], out.flops[index] = step.step_s, 0.0, step.hardware_flops
        return out


def predict(
    hw: roofline.Hardware, ops: Sequence[Any], where: str = "body.results", spec: HardwareSpec | None = None
) -> Predictions:
    """`Predictions.of(evaluate_ops(…))` for a list of measured ops (`schemas.benchmarks.ResultOp`) on `hw`, whose
    launch cost is their timing scope's (`scoped_core`); `where` names the list (`body.results.17.op.dtype`)."""
    return Predictions.of(evaluate_ops(hw, ops, lambda index: f"{where}.{index}.op", spec))


def predict_measured(
    spec: HardwareSpec,
    slug: str,
    scope: TimingScope,
    ops: Sequence[Any],
    host_overhead_s: float | None = None,
    where: str = "body.results",
) -> Predictions:
    """The raw model's time for measured ops in their timing scope (`POST /v1/benchmarks` stores these). A wall-clock
    measurement whose host's per-call cost is known (`host_overhead_s`) is predicted as kernel time (each kernel at
    the kernel-scope floor) plus that cost once per call: one jitted call dispatches once, and the kernels after the
    first queue behind it on the device. The cost is overhead, which calibrations leave alone."""
    if host_overhead_s is None:
        return predict(scoped_core(spec, slug, scope), ops, where, spec)
    preds = predict(scoped_core(spec, slug, TimingScope.kernel), ops, where, spec)
    preds.time_s = preds.time_s + host_overhead_s  # NaN (no prediction) stays NaN
    preds.overhead_s = preds.overhead_s + host_overhead_s
    return preds
