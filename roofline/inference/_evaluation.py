"""Vectorised evaluation: the ops of many forward passes (of many runs, phases and decode steps) collected as calls,
and every group of alike calls (one kind of op with the same static arguments on the same device) evaluated in one
numpy call, collectives likewise; a `Corrector` sees each group once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roofline._hardware import Hardware
from roofline._kernels import Kernel, single
from roofline._num import Array
from roofline.collectives import Switch, Topology, collective, fabric_class, with_link
from roofline.inference._config import Corrector, InferenceConfigError, IntArray, OpGroup, System
from roofline.intervals import COLLECTIVE, IntervalTable, collective_regime, family, regime
from roofline.ops import activation, attention, elementwise, embedding, layernorm, matmul, moe, rotary, softmax

_OPS: dict[str, Callable[..., list[Kernel]]] = {
    "matmul": matmul,
    "moe": moe,
    "attention": attention,
    "softmax": softmax,
    "layernorm": layernorm,
    "elementwise": elementwise,
    "activation": activation,
    "rotary": rotary,
    "embedding": embedding,
}
TERMS = ("flops", "bytes", "compute_s", "memory_s", "overhead_s", "time_s", "raw_time_s", "time_s_p10", "time_s_p90")
# Rows of a result: the (corrected) time, the model's own, and the (corrected) time at its band's lower and upper
# quantiles (equal to the time without an interval table).
TIME, RAW_TIME, P10, P90 = 5, 6, 7, 8


class Call:
    """One op of a forward pass at `points` points (1-D `sizes`); `index` maps the phase's samples to the points.
    Calls with equal `key` are evaluated together."""

    __slots__ = (
        "adjust", "correct", "hw", "index", "intervals", "key", "label", "method", "op", "points", "result", "sizes",
        "static", "vector_dtype",
    )  # fmt: skip

    def __init__(
        self,
        hw: Hardware,
        op: str,
        static: tuple[tuple[str, Any], ...],
        sizes: dict[str, Array],
        index: IntArray,
        vector_dtype: str,
        adjust: tuple[tuple[str, float], ...] = (),
        correct: Corrector | None = None,
        intervals: IntervalTable | None = None,
    ) -> None:
        self.hw, self.op, self.static, self.sizes, self.index = hw, op, static, sizes, index
        self.vector_dtype, self.adjust, self.correct, self.intervals = vector_dtype, adjust, correct, intervals
        self.points = len(next(iter(sizes.values())))
        self.key = (id(hw), op, static, adjust, vector_dtype, tuple(sizes), id(correct), id(intervals))
        self.result: Array = _NO_RESULT  # TERMS × points, once evaluated
        self.method: IntArray = _NO_METHOD  # per point, once evaluated: how a corrector made its time (0: none)
        self.label = ""


_NO_RESULT: Array = np.zeros((len(TERMS), 0))
_NO_METHOD: IntArray = np.zeros(0, dtype=np.int64)


def families(op: str, static: dict[str, Any], sizes: dict[str, Array]) -> Any:
    """The interval family (`roofline.intervals.family`) of an op at each of its points: attention's by its query
    length, a layernorm with `rms` is an RMSNorm."""
    if op == "attention":
        return np.where(sizes["q_len"] == 1, family(op, decode=True), family(op))
    if op == "layernorm" and static.get("rms"):
        return family("rmsnorm")
    return family(op, str(static.get("dtype", "bf16")), str(static.get("quantization", "none")))


def _apply(kernels: list[Kernel], adjust: tuple[tuple[str, float], ...]) -> None:
    """Storage types the op functions take as one dtype: a matmul's weight operand (B) read at the weight or KV
    dtype, flash attention's K/V at the KV dtype, a gated epilogue writing half of its product's columns."""
    # The product itself: a quantised matmul's quantisation kernels come before it (`roofline.ops.matmul`).
    main = next((k for k in kernels if "b_bytes" in k.extra), kernels[0])
    for what, factor in adjust:
        if what == "b_operand":
            main.external_in_bytes = main.external_in_bytes + main.extra["b_bytes"] * (factor - 1.0)
        elif what == "external":
            main.external_in_bytes = main.external_in_bytes * factor
        elif what == "out":
            main.out_bytes = main.out_bytes * factor
        else:  # pragma: no cover - internal
            raise ValueError(f"unknown adjustment {what!r}")


@dataclass
class CollectiveCall:
    """One collective at `message_bytes` (1-D) among `devices` devices of a system."""

    topology: Callable[[int], Topology]
    op: str
    devices: int
    message_bytes: Array
    owner: int
    dtype: str = "bf16"
    correct: Corrector | None = None
    intervals: IntervalTable | None = None
    time_s: Array = field(default_factory=lambda: np.zeros(0))  # corrected, when there is a corrector
    raw_time_s: Array = field(default_factory=lambda: np.zeros(0))
    method: IntArray = field(default_factory=lambda: _NO_METHOD)
    label: str = ""
    band: tuple[Array, Array] | None = None  # factors p10 / time and p90 / time per message (None: no table)
    # "auto": the collective library's fastest algorithm; "custom": an engine's own all-reduce kernels (`custom_s`).
    algorithm: str = "auto"
    launch_s: float = 0.0  # the custom kernels' launch (the device's kernel launch)

    def seconds(self, term: int) -> Array:
        if term == RAW_TIME:
            return self.raw_time_s
        if term in (P10, P90) and self.band is not None:
            return self.time_s * self.band[term - P10]
        return self.time_s


# TensorRT-LLM hands all-reduces of 2 MiB and more to NCCL: its all-reduce table equals NCCL's from there on
# (aiconfigurator's A100 `custom_allreduce_perf.csv`, which bench.validate_collectives predicts with this bound).
CUSTOM_ALL_REDUCE_MAX_BYTES = float(2 << 20)


def custom_s(op: str, messages: Array, topology: Topology, launch_s: float, library_s: Array) -> Array:
    """An all-reduce as the serving engines run it (TensorRT-LLM's AllReduceStrategy AUTO, vLLM's and SGLang's
    custom all-reduce): below `CUSTOM_ALL_REDUCE_MAX_BYTES` on an NVLink switch, one kernel in which every device
    reads its peers' buffers (one-shot, or two-shot: reduce-scatter then all-gather), "direct", launched as a kernel
    (`launch_s`); the library's time (`library_s`) beyond, and off NVLink (PCIe servers: TensorRT-LLM's table of L40S
    and RTX Pro 6000 equals NCCL's). aiconfigurator's measured custom all-reduces under 2 MiB are 13-29 % faster than
    this on A100, B200 and GB200, NCCL's algorithms 2.5 × slower (decision 0043)."""
    if op != "all_reduce" or not isinstance(topology, Switch) or fabric_class(topology) != "scale_up":
        return library_s
    direct = collective(op, messages, with_link(topology, launch_s=launch_s), "direct").time_s
    out: Array = np.where(messages < CUSTOM_ALL_REDUCE_MAX_BYTES, np.asarray(direct, dtype=np.float64), library_s)
    return out


class Evaluator:
    """Collects the ops of many passes and evaluates each group of alike ops in one vectorised call."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.collective_calls: list[CollectiveCall] = []
        self.owner = 0  # the run whose ops are being added

    def add(self, call: Call) -> Call:
        self.calls.append(call)
        return call

    def collective(
        self, system: System, op: str, devices: int, message_bytes: Array, dtype: str = "bf16",
        algorithm: str = "auto",
    ) -> CollectiveCall:  # fmt: skip
        """Register a collective among `devices` devices of `system` at `message_bytes` (1-D); `algorithm` "custom":
        an all-reduce as the serving engines run it (`custom_s`)."""
        if system.topology is None:
            raise InferenceConfigError(
                "hardware", f"{system.hardware.name} has no interconnect for a {devices}-device {op}"
            )
        call = CollectiveCall(
            system.topology, op, devices, message_bytes, self.owner, dtype, system.correct, system.intervals,
            algorithm=algorithm, launch_s=system.hardware.launch_s,
        )  # fmt: skip
        self.collective_calls.append(call)
        return call

    def run(self) -> None:
        """Evaluate every collective and op registered so far, each group of alike ones in one call."""
        self._run_collectives()
        self._run_ops()

    def _run_collectives(self) -> None:
        """Collectives of one kind on one topology and group size, at every message size at once."""
        coll_groups: dict[tuple[Any, ...], list[CollectiveCall]] = {}
        for coll in self.collective_calls:
            key = (
                id(coll.topology), coll.op, coll.devices, coll.dtype, id(coll.correct), id(coll.intervals),
                coll.algorithm, coll.launch_s,
            )  # fmt: skip
            coll_groups.setdefault(key, []).append(coll)
        for colls in coll_groups.values():
            head = colls[0]
            try:
                # A send_recv over a group's topology is between neighbours: across nodes when the group spans them.
                topology = head.topology(head.devices)
                messages = np.concatenate([c.message_bytes for c in colls])
                raw = np.asarray(collective(head.op, messages, topology).time_s, dtype=np.float64)
                if head.algorithm == "custom":
                    raw = custom_s(head.op, messages, topology, head.launch_s, raw)
            except ValueError as err:
                field_ = {"all_reduce": "parallelism.tensor", "all_to_all": "parallelism.expert"}.get(
                    head.op, "parallelism.pipeline"
                )
                message = err.message if isinstance(err, InferenceConfigError) else str(err)
                raise InferenceConfigError(field_, message, min(c.owner for c in colls)) from None
            raw = np.broadcast_to(raw, messages.shape)
            seconds, method, label = raw, np.zeros(raw.shape, dtype=np.int64), ""
            if head.correct is not None:
                static = {"collective": head.op, "devices": head.devices, "dtype": head.dtype}
                fixed = head.correct(OpGroup("collective", static, {"bytes": messages}, raw, raw))
                seconds, method, label = fixed.time_s, fixed.method, fixed.label
            band = None
            if head.intervals is not None:  # the collectives' band of each message's regime (roofline.intervals)
                band = head.intervals.factors(COLLECTIVE, collective_regime(messages, fabric_class(topology)))
            offset = 0
            for coll in colls:
                part = slice(offset, offset + coll.message_bytes.size)
                coll.time_s, coll.raw_time_s, coll.method = seconds[part], raw[part], method[part]
                coll.label = label
                coll.band = (band[0][part], band[1][part]) if band is not None else None
                offset += coll.message_bytes.size
        self.collective_calls = []

    def _run_ops(self) -> None:
        """Ops of one kind with the same static arguments on the same device (`Call.key`), at every point at once."""
        groups: dict[tuple[Any, ...], list[Call]] = {}
        for call in self.calls:
            groups.setdefault(call.key, []).append(call)
        for calls in groups.values():
            first = calls[0]
            sizes = {name: np.concatenate([c.sizes[name] for c in calls]) for name in first.sizes}
            kernels = _OPS[first.op](first.hw, **sizes, **dict(first.static))
            _apply(kernels, first.adjust)
            # 16-bit elementwise math runs in fp32 (opmath; adapters.evaluate): the fp32 vector rate.
            est = single(kernels, first.hw, first.hw.vector_peak("fp32"), first.hw.launch_s)
            terms = (est.flops, est.bytes, est.compute_s, est.memory_s, est.overhead_s, est.time_s, est.time_s)
            values = np.empty((len(TERMS), np.size(est.time_s)))
            values[:P10] = np.stack(np.broadcast_arrays(*terms))
            how, label = np.zeros(values.shape[1], dtype=np.int64), ""
            if first.correct is not None:
                work = values[TIME] - values[4]
                fixed = first.correct(OpGroup(first.op, dict(first.static), sizes, work, values[RAW_TIME].copy()))
                values[TIME], how, label = fixed.time_s, fixed.method, fixed.label
            values[P10] = values[P90] = values[TIME]
            if first.intervals is not None:  # the band of the physical model's regime (adapters.with_interval)
                where = regime(values[RAW_TIME], values[4], values[2], values[3])
                low, high = first.intervals.factors(families(first.op, dict(first.static), sizes), where)
                values[P10] *= low
                values[P90] *= high
            start = 0
            for c in calls:
                stop = start + c.points
                c.result, c.method, c.label = values[:, start:stop], how[start:stop], label
                start = stop
        self.calls = []
