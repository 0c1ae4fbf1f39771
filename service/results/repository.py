"""Queries over stored results (measured timings with their predictions): their one owner. Uploads add them
(`service.benchmarks`), calibrations read and stamp them, the accuracy report and the charts read them. No rules
here: those live in the services."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import pydantic_core
from sqlalchemy import ColumnElement, Table, func, insert, select, update
from sqlalchemy.orm import Session

from service.orm import BenchmarkResult, BenchmarkRun


@dataclass(frozen=True)
class RunFilters:
    """Results (or runs) by their run's profile, software, timing scope and upload time, and by their own op kind
    and dtype."""

    hardware: str | None = None
    hardware_version: int | None = None  # the profile's version the results were predicted with
    op_kind: str | None = None
    dtype: str | None = None
    software: str | None = None  # a name
    software_version: str | None = None
    timing_scope: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def run_conditions(f: RunFilters) -> list[ColumnElement[bool]]:
    """The conditions on a result's run (`BenchmarkRun`): its profile, timing scope, upload time and software."""
    run = BenchmarkRun
    where: list[ColumnElement[bool]] = []
    if f.hardware is not None:
        where.append(run.hardware == f.hardware)
    if f.hardware_version is not None:
        where.append(run.hardware_version == f.hardware_version)
    if f.timing_scope is not None:
        where.append(run.timing_scope == f.timing_scope)
    if f.since is not None:
        where.append(run.created_at >= f.since)
    if f.until is not None:
        where.append(run.created_at < f.until)
    if f.software is not None:
        version = run.software[f.software].as_string()
        where.append(version.is_not(None) if f.software_version is None else version == f.software_version)
    return where


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


RESULTS = cast(Table, BenchmarkResult.__table__)


class ResultRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, columns: dict[str, list[Any]]) -> None:
        """Insert result rows, given column by column, in the session's transaction: COPY on PostgreSQL, a Core
        executemany elsewhere; never one ORM object per row."""
        names = list(columns)
        connection = self.session.connection()
        if connection.dialect.name != "postgresql":
            rows = [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
            if rows:
                connection.execute(insert(RESULTS), rows)
            return
        raw = connection.connection.driver_connection  # the psycopg connection, in this transaction
        assert raw is not None
        with raw.cursor() as cursor, cursor.copy(f"COPY {RESULTS.name} ({', '.join(names)}) FROM STDIN") as copy:
            copy.write(copy_text(columns))

    def page(
        self, run_id: int, op_kind: str | None, dtype: str | None, limit: int, offset: int
    ) -> tuple[list[BenchmarkResult], int]:
        """A page of one run's results, in id order."""
        where = [BenchmarkResult.run_id == run_id]
        if op_kind is not None:
            where.append(BenchmarkResult.op_kind == op_kind)
        if dtype is not None:
            where.append(BenchmarkResult.dtype == dtype)
        total = self.session.scalar(select(func.count()).select_from(BenchmarkResult).where(*where)) or 0
        rows = self.session.scalars(
            select(BenchmarkResult).where(*where).order_by(BenchmarkResult.id).limit(limit).offset(offset)
        ).all()
        return list(rows), total

    def columns(self, f: RunFilters, families: list[str] | None, predicted_only: bool = True) -> ResultColumns:
        """Results (with a prediction, unless `predicted_only` is false) of runs matching `f` (its hardware, scope,
        software and dates) and of these op kinds and dtype, in id order."""
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
        query = query.where(*run_conditions(f))
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

    def count_runs(self, hardware: str) -> int:
        """Runs on profile `hardware` (whose results refer to it)."""
        return (
            self.session.scalar(select(func.count()).select_from(BenchmarkRun).where(BenchmarkRun.hardware == hardware))
            or 0
        )

    def stamp(self, updates: list[dict[str, Any]]) -> None:
        """Set calibrated_s and calibration_id by result id (an executemany of UPDATEs)."""
        if updates:
            self.session.execute(update(BenchmarkResult), updates)


def _text_column(values: list[Any]) -> list[str]:
    """One column in COPY's text format: NULL is \\N; a backslash, tab or newline in text is escaped; numbers are
    their repr (exact, and PostgreSQL parses 1e-05)."""
    if not values:
        return []
    sample = next((v for v in values if v is not None), None)
    if isinstance(sample, dict):  # JSON documents, as their text
        text = [None if v is None else _escape(pydantic_core.to_json(v).decode()) for v in values]
    elif isinstance(sample, str):
        text = [None if v is None else _escape(v) for v in values]
    elif None in values:
        text = [None if v is None else repr(v) for v in values]
    else:
        return list(map(repr, values))
    return ["\\N" if v is None else v for v in text]


def _escape(text: str) -> str:
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def copy_text(columns: dict[str, list[Any]]) -> bytes:
    """Rows for `COPY … FROM STDIN` (text format), built column by column: several times faster than a
    write_row call per row."""
    texts = [_text_column(values) for values in columns.values()]
    return "".join("\t".join(row) + "\n" for row in zip(*texts, strict=True)).encode()
