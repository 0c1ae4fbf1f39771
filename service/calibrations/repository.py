"""Queries for calibrations and the results they are fitted on. No rules here: those live in service.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from service.benchmarks.repository import RunFilters
from service.orm import BenchmarkResult, BenchmarkRun, Calibration


@dataclass
class ResultColumns:
    """Stored results, column by column (one query, no ORM objects)."""

    id: list[int] = field(default_factory=list)
    run_id: list[int] = field(default_factory=list)
    hardware: list[str] = field(default_factory=list)
    op: list[dict[str, Any]] = field(default_factory=list)
    op_kind: list[str] = field(default_factory=list)
    dtype: list[str] = field(default_factory=list)
    median_s: list[float] = field(default_factory=list)
    predicted_s: list[float] = field(default_factory=list)
    predicted_overhead_s: list[float] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    bytes: list[float] = field(default_factory=list)
    calibrated_s: list[float | None] = field(default_factory=list)


class CalibrationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, calibration_id: int) -> Calibration | None:
        return self.session.get(Calibration, calibration_id)

    def latest(self, hardware: str) -> Calibration | None:
        return self.session.scalar(
            select(Calibration).where(Calibration.hardware == hardware).order_by(Calibration.version.desc()).limit(1)
        )

    def recent(self, hardware: str, limit: int = 50) -> list[Calibration]:
        """The hardware's calibrations, newest first: "latest" takes, per op family, the newest that covers it."""
        return list(
            self.session.scalars(
                select(Calibration)
                .where(Calibration.hardware == hardware)
                .order_by(Calibration.version.desc())
                .limit(limit)
            ).all()
        )

    def next_version(self, hardware: str) -> int:
        current = self.session.scalar(select(func.max(Calibration.version)).where(Calibration.hardware == hardware))
        return (current or 0) + 1

    def add(self, calibration: Calibration) -> None:
        self.session.add(calibration)
        self.session.flush()

    def page(self, hardware: str | None, limit: int, offset: int) -> tuple[list[Calibration], int]:
        where = [] if hardware is None else [Calibration.hardware == hardware]
        total = self.session.scalar(select(func.count()).select_from(Calibration).where(*where)) or 0
        rows = self.session.scalars(
            select(Calibration).where(*where).order_by(Calibration.id.desc()).limit(limit).offset(offset)
        ).all()
        return list(rows), total

    def results(self, f: RunFilters, families: list[str] | None, predicted_only: bool = True) -> ResultColumns:
        """Results with a prediction, of runs matching `f` (its hardware, scope, software and dates) and of these
        op kinds and dtype, in id order."""
        r, run = BenchmarkResult, BenchmarkRun
        query = (
            select(
                r.id, r.run_id, run.hardware, r.op, r.op_kind, r.dtype, r.median_s, r.predicted_s,
                r.predicted_overhead_s, r.flops, r.bytes, r.calibrated_s,
            )
            .join(run, run.id == r.run_id)
            .order_by(r.id)
        )  # fmt: skip
        if predicted_only:
            query = query.where(r.predicted_s.is_not(None))
        if f.hardware is not None:
            query = query.where(run.hardware == f.hardware)
        if f.timing_scope is not None:
            query = query.where(run.timing_scope == f.timing_scope)
        if f.since is not None:
            query = query.where(run.created_at >= f.since)
        if f.until is not None:
            query = query.where(run.created_at < f.until)
        if f.software is not None:
            version = run.software[f.software].as_string()
            query = query.where(version.is_not(None) if f.software_version is None else version == f.software_version)
        if f.op_kind is not None:
            query = query.where(r.op_kind == f.op_kind)
        if families is not None:
            query = query.where(r.op_kind.in_(families))
        if f.dtype is not None:
            query = query.where(r.dtype == f.dtype)
        out = ResultColumns()
        names = list(ResultColumns.__dataclass_fields__)
        for row in self.session.execute(query):
            for name, value in zip(names, row, strict=True):
                getattr(out, name).append(value)
        return out

    def stamp(self, updates: list[dict[str, Any]]) -> None:
        """Set calibrated_s and calibration_id by result id (an executemany of UPDATEs)."""
        if updates:
            self.session.execute(update(BenchmarkResult), updates)
