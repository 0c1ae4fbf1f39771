"""Calibrations applied to the core's estimates, before anything is rendered.

What a calibration sees of an op: its family and dtype (the group it belongs to), its variant (the flags that must
match for two measurements to be neighbours) and its sizes (log2 of every size field). A stored calibration's fitted
corrections (`Fitted`) meet ops in one place, `correct` (`roofline.calibration.apply`), for op estimates, stored
results and inference runs alike: an op of an inference breakdown gets, call by call, the time an op estimate of that
shape would get with the same calibration.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

import numpy as np
from numpy.typing import NDArray

import roofline
from adapters._ops import size_fields
from roofline.calibration import Correction, Method, apply
from schemas.benchmarks import ResultOp
from schemas.common import InputModel

# kind → op class, from the union itself so that a new op kind is covered without an edit here.
OP_CLASSES: dict[str, type[InputModel]] = {
    get_args(cls.model_fields["kind"].annotation)[0]: cls for cls in get_args(get_args(ResultOp)[0])
}
UNCALIBRATED = frozenset({"chain", "training_step"})  # no sizes of its own; a whole step of many ops
METHODS = {Method.interpolated: "interpolated", Method.fitted: "fitted", Method.physical: "physical"}
NOTES = {
    "interpolated": "interpolated between measured neighbours",
    "fitted": "the fitted size-dependent correction only: no measured neighbour close enough",
    "physical": "the physical model: outside the measured range or op family not calibrated",
}
NOT_COVERED = "the calibration has no data for this op family and dtype: the physical model"
UNDESCRIBED = "no op kind of the calibrations describes it (dtype or flags): the physical model"
APPLIED = (
    "each op corrected call by call as an op estimate of its family would be (interpolated: measured neighbours; "
    "fitted: the size-dependent correction only; physical: outside the measured range), then summed; raw_time_s "
    "is the physical model's time"
)


# --- what a calibration sees of an op ----------------------------------------------------------------------------


def group_of(doc: dict[str, Any]) -> str:
    """`family/dtype`, e.g. `matmul/bf16`, each fitted on its own; a collective's family names the collective
    (`collective.all_reduce/fp16`): an all-gather's cost is no guide to a send-receive's."""
    if doc["kind"] == "collective":
        return f"collective.{doc['collective']}/{doc.get('dtype', '')}"
    return f"{doc['kind']}/{doc.get('dtype', '')}"


def op_kind(family: str) -> str:
    """The op kind of a calibration family (`collective.all_reduce` → `collective`)."""
    return family.split(".", 1)[0]


def feature_names(cls: type[InputModel]) -> list[str]:
    """The sizes a calibration of this op class measures distances in: every size field, then the optional ones."""
    sizes, optional, _ = size_fields(cls)
    return [*sizes, *optional]


def variant_key(doc: dict[str, Any], cls: type[InputModel]) -> str:
    """The flags two ops must share to be neighbours: every non-size field, and which optional sizes are unset."""
    _, optional, others = size_fields(cls)
    return json.dumps(
        [[doc.get(name) for name in others if name != "kind"], [doc.get(name) is None for name in optional]],
        sort_keys=True,
    )


def log2_sizes(columns: list[NDArray[np.float64]], n: int) -> NDArray[np.float64]:
    """Features (n, d) from d columns of sizes (an unset or zero size counts as 1)."""
    if not columns:
        return np.zeros((n, 0))
    stacked = np.stack([np.broadcast_to(np.asarray(c, dtype=np.float64), (n,)) for c in columns], axis=1)
    out: NDArray[np.float64] = np.log2(np.maximum(np.nan_to_num(stacked, nan=1.0), 1.0))
    return out


def describe(docs: list[dict[str, Any]]) -> tuple[list[str], NDArray[np.float64], list[str]]:
    """For ops of one family (JSON documents as stored): variant keys, features (n, d) and the feature names."""
    if not docs:
        return [], np.zeros((0, 0)), []
    cls = OP_CLASSES[docs[0]["kind"]]
    names = feature_names(cls)
    columns = [np.array([float(doc.get(name) or 1.0) for doc in docs], dtype=np.float64) for name in names]
    return [variant_key(doc, cls) for doc in docs], log2_sizes(columns, len(docs)), names


def describe_sized(
    template: dict[str, Any], sizes: dict[str, NDArray[np.float64]], n: int
) -> tuple[str, NDArray[np.float64]]:
    """n ops that share a template (a stored-form document: `template_of`) and differ in `sizes` (arrays of n):
    their one variant key and their features, as `describe` would give for the n documents, without building them."""
    cls = OP_CLASSES[template["kind"]]
    columns = [
        sizes[name] if name in sizes else np.full(n, float(template.get(name) or 1.0)) for name in feature_names(cls)
    ]
    return variant_key(template, cls), log2_sizes(columns, n)


# The core's op keyword → schemas.ops field, where they differ.
_FIELD_NAMES = {"access": "memory_access"}


def template_of(op: str, static: dict[str, Any], sizes: dict[str, Any]) -> dict[str, Any] | None:
    """The stored form (schemas.benchmarks.ResultOp as JSON) of the ops an inference run evaluates as one group
    (`roofline.OpGroup`: a core op function and its keyword arguments, or a collective), with every feature size 1
    and every other field set; None when no op kind describes them (a dtype or flag the schemas do not take, or a
    field that is part of the variant, such as attention's kv_heads, varying within the group)."""
    if op == "collective":
        fields: dict[str, Any] = dict(static)
        kind = "collective"
    else:
        fields = {_FIELD_NAMES.get(k, k): (list(v) if isinstance(v, tuple) else v) for k, v in static.items()}
        kind = op
        if op == "layernorm":
            kind = "rmsnorm" if fields.pop("rms", False) else "layernorm"
    cls = OP_CLASSES.get(kind)
    if cls is None:
        return None
    features = set(feature_names(cls))
    for name, values in sizes.items():
        column = np.asarray(values, dtype=np.float64).reshape(-1)
        if name in features:
            # The first point, whole: it satisfies the schema's cross-field rules (kv_heads divides heads); the
            # features themselves come from every point (`describe_sized`).
            fields[name] = max(1, math.ceil(np.nan_to_num(column[0], nan=1.0, posinf=1.0))) if column.size else 1
            continue
        if column.size and np.any(column != column[0]):
            return None  # a variant field must be one value for the group
        fields[name] = float(column[0]) if column.size else 1
    try:
        out: dict[str, Any] = cls.model_validate({"kind": kind, **fields}).model_dump(mode="json")
    except ValueError:  # the schema refuses it (pydantic's ValidationError is a ValueError)
        return None
    return out


def variant_codes(keys: list[str], known: list[str]) -> NDArray[np.int64]:
    """Integer codes for variant keys against the calibration's list (−1: a variant it never saw)."""
    index = {key: i for i, key in enumerate(known)}
    return np.array([index.get(key, -1) for key in keys], dtype=np.int64)


# --- fitted corrections, applied ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FittedGroup:
    correction: Correction
    variants: list[str]  # variant keys, by code


@dataclass(frozen=True)
class Fitted:
    """One stored calibration, parsed: its identity and a fitted correction per `family/dtype` group."""

    id: int
    version: int
    hardware: str
    groups: dict[str, FittedGroup]

    @classmethod
    def parse(cls, id: int, version: int, hardware: str, model: dict[str, Any]) -> Fitted:
        """From the stored model document: `{"groups": {name: {"correction", "variants", …}}}`."""
        groups = {
            name: FittedGroup(Correction.from_json(doc["correction"]), list(doc["variants"]))
            for name, doc in model["groups"].items()
        }
        return cls(id, version, hardware, groups)


def covering(calibrations: Sequence[Fitted], group: str) -> tuple[Fitted, FittedGroup] | None:
    """The first calibration (newest first) with a fitted correction for `family/dtype`, and that correction."""
    return next(((c, c.groups[group]) for c in calibrations if group in c.groups), None)


def correct(
    group: FittedGroup,
    keys: list[str] | str,
    features: NDArray[np.float64],
    work_s: NDArray[np.float64],
    physical_s: NDArray[np.float64],
    own: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Calibrated seconds and `Method` for ops of one group (variant keys and features from `describe` or
    `describe_sized`): the one place a fitted correction meets ops. One key stands for every op."""
    if isinstance(keys, str):
        known = group.variants.index(keys) if keys in group.variants else -1
        codes = np.full(len(work_s), known, dtype=np.int64)
    else:
        codes = variant_codes(keys, group.variants)
    return apply(group.correction, features, work_s, physical_s, codes, own)


def calibrate_docs(
    calibrations: Sequence[Fitted],
    docs: list[dict[str, Any]],
    work_s: NDArray[np.float64],
    physical_s: NDArray[np.float64],
    own: dict[int, int] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """Calibrated seconds, `Method` and the calibration id used (0: none) for ops (JSON documents) with their
    modelled work and time, several calibrations in order of preference (newest first): each op family and dtype
    gets the first one that covers it; NaN and physical for the rest. `own` maps an op's position to its index among
    the training points of its group, to leave it out of its own neighbours."""
    out = np.full(len(docs), np.nan)
    method = np.full(len(docs), int(Method.physical), dtype=np.int64)
    used = np.zeros(len(docs), dtype=np.int64)
    by_group: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        if doc["kind"] not in UNCALIBRATED and np.isfinite(physical_s[i]):
            by_group.setdefault(group_of(doc), []).append(i)
    for name, indices in by_group.items():
        found = covering(calibrations, name)
        if found is None:
            continue
        keys, features, _ = describe([docs[i] for i in indices])
        idx = np.asarray(indices)
        own_idx = None if own is None else np.array([own.get(i, -1) for i in indices], dtype=np.int64)
        values, how = correct(found[1], keys, features, work_s[idx], physical_s[idx], own_idx)
        out[idx], method[idx], used[idx] = values, how, found[0].id
    return out, method, used


# --- op estimates ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chosen:
    """What `options.calibration` chose for a profile: calibrations newest first, or (`note` set) none, and what
    the response's `assumptions.calibration` says instead: that the physical model stands, and why."""

    requested: str | int
    calibrations: list[Fitted]
    note: dict[str, Any] | None = None


def calibrate_points(
    chosen: Chosen, docs: list[dict[str, Any]], est: roofline.Estimate
) -> tuple[NDArray[np.float64] | None, dict[str, Any], list[dict[str, Any]]]:
    """Calibrated times for the points of an estimate (each point's op as JSON in `docs`); what
    `assumptions.calibration` says for all of them together, and for each one. Times are None when nothing applies
    (the physical model stands, and the note says why)."""
    if chosen.note is not None:
        return None, chosen.note, [chosen.note] * len(docs)
    rows = chosen.calibrations
    physical = np.atleast_1d(np.asarray(est.time_s, dtype=np.float64))
    work = physical - np.broadcast_to(np.asarray(est.overhead_s, dtype=np.float64), physical.shape)
    calibrated, how, used = calibrate_docs(rows, docs, work, physical)
    result = np.where(np.isfinite(calibrated), calibrated, physical)
    by_id = {row.id: row for row in rows}
    cache: dict[tuple[int, str], dict[str, Any]] = {}
    each = []
    for cid, m in zip(used.tolist(), how.tolist(), strict=True):
        label = METHODS[Method(m)]
        if (cid, label) not in cache:
            row = by_id.get(cid, rows[0])  # an op no calibration covers names the newest one asked about
            cache[(cid, label)] = {
                "id": row.id, "version": row.version, "hardware": row.hardware, "method": label, "note": NOTES[label],
            }  # fmt: skip
        each.append(cache[(cid, label)])
    distinct = {(e["id"], e["method"]) for e in each}
    if len(distinct) == 1:
        info = each[0]
    else:
        counts: dict[str, int] = {}
        for e in each:
            counts[e["method"]] = counts.get(e["method"], 0) + 1
        info = {"ids": sorted({e["id"] for e in each}), "method": counts, "note": "per point: see each item"}
    return result, info, each


def calibrated(est: roofline.Estimate, times: NDArray[np.float64] | None) -> roofline.Estimate:
    """The estimate with calibrated times (None: its own), the physical model's in `details.raw_time_s`."""
    extra = {**est.extra, "raw_time_s": np.asarray(est.time_s, dtype=np.float64)}
    time_s = est.time_s if times is None else times.reshape(np.shape(est.time_s))
    return dataclasses.replace(est, time_s=time_s, extra=extra)


# --- inference runs ----------------------------------------------------------------------------------------------


class RunCorrector:
    """A `roofline.Corrector` over a list of calibrations (newest first: each op family and dtype gets the first that
    covers it). Each group of ops a run evaluates together (`roofline.OpGroup`: one op kind and its settings at every
    layer, pass and decode step) is described as the op estimates describe an op (`template_of`, `describe_sized`)
    and corrected by `correct`, before anything is summed. Collectives (tensor-parallel all-reduces, expert
    all-to-alls, pipeline sends) get their collective kind's correction. Remembers which calibration each group it
    saw used (None: none covers it)."""

    def __init__(self, calibrations: list[Fitted]) -> None:
        self.calibrations = calibrations
        self.used: dict[str, Fitted | None] = {}
        self.undescribed: set[str] = set()

    def __call__(self, group: roofline.OpGroup) -> roofline.Corrected:
        n = group.time_s.size
        sizes = dict(group.sizes)
        if group.op == "attention" and np.array_equal(sizes["kv_heads"], sizes["heads"]):
            del sizes["kv_heads"]  # MHA, stored with kv_heads unset as measured MHA is
        template = template_of(group.op, group.static, sizes)
        physical = np.zeros(n, dtype=np.int64)
        if template is None:
            label = f"{group.op}/{group.static.get('dtype', '')}"
            self.used[label] = None
            self.undescribed.add(label)
            return roofline.Corrected(group.time_s, physical, label)
        label = group_of(template)
        found = covering(self.calibrations, label)
        self.used[label] = found[0] if found else None
        if found is None:
            return roofline.Corrected(group.time_s, physical, label)
        key, features = describe_sized(template, sizes, n)
        values, how = correct(found[1], key, features, group.work_s, group.time_s)
        return roofline.Corrected(values, how, label)


@dataclass
class CalibrationUse:
    """What `options.calibration` means for one hardware profile of an inference request: a corrector, or the note
    saying why the physical model stands ("latest" on a profile with no calibration)."""

    requested: str | int
    corrector: RunCorrector | None = None
    note: dict[str, Any] | None = field(default=None)

    @classmethod
    def of(cls, chosen: Chosen) -> CalibrationUse:
        if chosen.note is not None:
            return cls(chosen.requested, None, chosen.note)
        return cls(chosen.requested, RunCorrector(chosen.calibrations))


def row_calibration(row: roofline.OpRow) -> str | None:
    """How a breakdown row was corrected: its methods, e.g. "fitted" or "interpolated, physical"."""
    if not row.corrections:
        return None
    return ", ".join(sorted({METHODS[Method(m)] for _, m in row.corrections}))


def run_summary(use: CalibrationUse | None, phases: dict[str, list[roofline.OpRow]]) -> Any:
    """`assumptions.calibration` of an inference response: which calibration corrected which ops of each phase and
    how, and which ops no calibration covers."""
    if use is None:
        return "none"
    if use.corrector is None:
        return use.note
    applied: dict[str, dict[str, Any]] = {}
    uncovered: dict[str, dict[str, Any]] = {}
    for phase, rows in phases.items():
        for row in rows:
            for label, method in row.corrections:
                calibration = use.corrector.used.get(label)
                if calibration is None:
                    note = UNDESCRIBED if label in use.corrector.undescribed else NOT_COVERED
                    entry = uncovered.setdefault(label, {"ops": {}, "note": note})
                else:
                    entry = applied.setdefault(
                        label,
                        {"id": calibration.id, "version": calibration.version, "methods": [], "ops": {}},
                    )
                    if METHODS[Method(method)] not in entry["methods"]:
                        entry["methods"] = sorted([*entry["methods"], METHODS[Method(method)]])
                names = entry["ops"].setdefault(phase, [])
                if row.name not in names:
                    names.append(row.name)
    ids = sorted({(e["id"], e["version"]) for e in applied.values()})
    hardware = use.corrector.calibrations[0].hardware
    return {
        "requested": use.requested,
        "hardware": hardware,
        "calibrations": [{"id": i, "version": v} for i, v in ids],
        "applied": applied,
        "not_covered": uncovered,
        "note": APPLIED if applied else "no op of this run is in a calibrated op family: the physical model",
    }
