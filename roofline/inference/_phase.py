"""A phase's forward passes at its sample points (prefill: one; decode: the sampled steps) and the rows of its
breakdown: each op's figures summed over layers, passes and samples."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from roofline._num import Array
from roofline.inference._config import IntArray
from roofline.inference._evaluation import P10, P90, RAW_TIME, TERMS, TIME, Call, CollectiveCall
from roofline.inference._results import OpRow


@dataclass
class _Entry:
    call: Call
    count: float  # kernels of this kind per forward pass (layers)
    point_weight: Array | None = None  # per point of the call: a share of the pass that uses it (0 or 1)


@dataclass
class Pass:
    """The ops of forward passes at K sample points (prefill: one; decode: the sampled steps), on one device.

    A call's results map to samples through its `index`; in the prefill (`sum_points`), attention has one point
    per distinct prompt length and its points are summed."""

    samples: int
    sum_points: bool = False
    rows: dict[str, list[_Entry]] = field(default_factory=dict)
    comm: dict[str, tuple[CollectiveCall, IntArray, float]] = field(default_factory=dict)  # name → (op, index, calls)
    _totals: dict[str, tuple[Array, float]] | None = field(default=None, repr=False)

    def add(self, name: str, call: Call, count: float, point_weight: Array | None = None) -> None:
        if count > 0:
            self.rows.setdefault(name, []).append(_Entry(call, count, point_weight))
            self._totals = None

    def totals(self) -> dict[str, tuple[Array, float]]:
        """Per row: its `TERMS` per forward pass at each sample (a TERMS × samples matrix) and its calls per pass;
        made once, after the evaluator has run (the matrices are shared: read, never write them)."""
        if self._totals is None:
            self._totals = self._sum()
        return self._totals

    def _sum(self) -> dict[str, tuple[Array, float]]:
        out: dict[str, tuple[Array, float]] = {}
        for name, entries in self.rows.items():
            acc = np.zeros((len(TERMS), self.samples))
            calls = 0.0
            for e in entries:
                values = e.call.result if e.point_weight is None else e.call.result * e.point_weight
                if self.sum_points and e.call.index.size == 0:
                    acc += e.count * values.sum(axis=1, keepdims=True)
                else:
                    acc += e.count * values[:, e.call.index]
                calls += e.count
            out[name] = (acc, calls)
        for name, (coll, index, calls) in self.comm.items():
            acc = np.zeros((len(TERMS), self.samples))
            acc[1], acc[TIME] = calls * coll.message_bytes[index], calls * coll.time_s[index]
            acc[RAW_TIME] = calls * coll.raw_time_s[index]
            acc[P10], acc[P90] = calls * coll.seconds(P10)[index], calls * coll.seconds(P90)[index]
            out[name] = (acc, calls)
        return out

    def corrections(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Per row: the distinct (label, method) of the corrections at the points it sums (empty: no corrector)."""
        out: dict[str, set[tuple[str, int]]] = {}
        for name, entries in self.rows.items():
            for e in entries:
                if e.call.correct is None:
                    continue
                used = e.call.method if self.sum_points and e.call.index.size == 0 else e.call.method[e.call.index]
                out.setdefault(name, set()).update((e.call.label, int(m)) for m in np.unique(used))
        for name, (coll, index, _) in self.comm.items():
            if coll.correct is not None:
                out.setdefault(name, set()).update((coll.label, int(m)) for m in np.unique(coll.method[index]))
        return {name: tuple(sorted(pairs)) for name, pairs in out.items()}


def pass_time(totals: dict[str, tuple[Array, float]], term: int = TIME) -> Array:
    """One forward pass's seconds at each sample: every row's `term` summed."""
    out: Array = np.sum([values[term] for values, _ in totals.values()], axis=0)
    return out


def timeline_row(
    name: str, calls: float, bytes_: float, time_s: float, raw_time_s: float | None = None,
    band: tuple[float, float] | None = None,
) -> OpRow:  # fmt: skip
    """A row of the pipeline's timeline that no kernel makes: the sends between stages, the bubble; `band` its time
    at the ops' p10 and p90."""
    p10, p90 = band if band is not None else (None, None)
    return OpRow(name, calls, 0.0, bytes_, 0.0, 0.0, 0.0, time_s, raw_time_s, (), p10, p90)


def op_rows(
    totals: dict[str, tuple[Array, float]],
    scale: Array,
    weights: Array,
    corrections: dict[str, tuple[tuple[str, int], ...]],
    corrected: bool,
    banded: bool = False,
) -> list[OpRow]:
    """Rows of a phase: per-pass figures at each sample, times the passes a device runs per sample (`scale`),
    summed over the samples with their weights; `banded`: with their times at the ops' p10 and p90."""
    rows = []
    for name, (values, calls) in totals.items():
        flops, bytes_, compute, memory, overhead, time, raw, p10, p90 = ((values * scale) @ weights).tolist()
        how = corrections.get(name, ())
        band = (p10, p90) if banded else (None, None)
        raw_ = raw if corrected else None
        rows.append(OpRow(name, calls, flops, bytes_, compute, memory, overhead, time, raw_, how, *band))
    return rows


def communication(totals: dict[str, tuple[Array, float]], scale: Array, weights: Array) -> dict[str, float]:
    """Seconds of a phase's collectives per group (tensor-parallel all-reduces, expert all-to-alls; the pipeline's
    sends are added by the timeline)."""
    out = {"tensor_parallel": 0.0, "pipeline": 0.0, "expert": 0.0}
    for name, group in (("tensor_parallel_all_reduce", "tensor_parallel"), ("expert_all_to_all", "expert")):
        if name in totals:
            out[group] = float((totals[name][0][5] * scale) @ weights)
    return out
