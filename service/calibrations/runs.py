"""Calibrations applied to inference runs (`POST /v1/estimate/inference`, its batch and `/v1/plan`).

Each group of ops a run evaluates together (`roofline.OpGroup`: one op kind and its settings at every layer, pass and
decode step) is described as the op estimates describe an op (`features.template_of`, `features.describe_sized`) and
corrected by the same function (`service.calibrations.service.correct`), before anything is summed: an op of the
breakdown gets, call by call, the time an op estimate of that shape would get with the same calibration. Collectives
(tensor-parallel all-reduces, expert all-to-alls, pipeline sends) get their collective kind's correction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

import roofline
from roofline.calibration import Method
from service.calibrations.features import describe_sized, group_of, template_of
from service.calibrations.service import METHODS, choose, correct, covering
from service.orm import Calibration

NOT_COVERED = "the calibration has no data for this op family and dtype: the physical model"
UNDESCRIBED = "no op kind of the calibrations describes it (dtype or flags): the physical model"
APPLIED = (
    "each op corrected call by call as an op estimate of its family would be (interpolated: measured neighbours; "
    "fitted: the size-dependent correction only; physical: outside the measured range), then summed; raw_time_s "
    "is the physical model's time"
)


class RunCorrector:
    """A `roofline.Corrector` over a list of calibrations (newest first: each op family and dtype gets the first that
    covers it). Remembers which calibration each group it saw used (None: none covers it)."""

    def __init__(self, calibrations: list[Calibration]) -> None:
        self.calibrations = calibrations
        self.used: dict[str, Calibration | None] = {}
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
    """What `options.calibration` means for one hardware profile of a request: a corrector, or the note saying why
    the physical model stands ("latest" on a profile with no calibration)."""

    requested: str | int
    corrector: RunCorrector | None = None
    note: dict[str, Any] | None = field(default=None)


def for_runs(session: Session, hardware: str | None, choice: str | int, where: str) -> CalibrationUse | None:
    """The calibration use for `options.calibration` = `choice` on a profile (`hardware`: its slug; None for an inline
    or patched one); None for "none". Errors name `where` (404 unknown id, 422 another profile's id)."""
    if choice == "none":
        return None
    rows, note = choose(session, hardware, choice, where)
    if note is not None:
        return CalibrationUse(choice, None, note)
    return CalibrationUse(choice, RunCorrector(rows))


def row_calibration(row: roofline.OpRow) -> str | None:
    """How a breakdown row was corrected: its methods, e.g. "fitted" or "interpolated, physical"."""
    if not row.corrections:
        return None
    return ", ".join(sorted({METHODS[Method(m)] for _, m in row.corrections}))


def summary(use: CalibrationUse | None, phases: dict[str, list[roofline.OpRow]]) -> Any:
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
