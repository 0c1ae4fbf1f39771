"""Queries over benchmark runs and results. No rules here: those live in service.py."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import pydantic_core
from sqlalchemy import Select, Table, exists, func, insert, select
from sqlalchemy.orm import Session

from service.orm import ApiKey, BenchmarkResult, BenchmarkRun


@dataclass(frozen=True)
class RunFilters:
    hardware: str | None = None
    op_kind: str | None = None
    dtype: str | None = None
    software: str | None = None  # a name
    software_version: str | None = None
    timing_scope: str | None = None
    since: datetime | None = None
    until: datetime | None = None


RESULTS = cast(Table, BenchmarkResult.__table__)


class BenchmarkRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, run_id: int) -> BenchmarkRun | None:
        return self.session.get(BenchmarkRun, run_id)

    def by_idempotency_key(self, api_key_id: int, key: str) -> BenchmarkRun | None:
        return self.session.scalar(
            select(BenchmarkRun).where(BenchmarkRun.api_key_id == api_key_id, BenchmarkRun.idempotency_key == key)
        )

    def add_run(self, run: BenchmarkRun) -> None:
        self.session.add(run)
        self.session.flush()

    def add_results(self, columns: dict[str, list[Any]]) -> None:
        """Insert result rows, given column by column, in the session's transaction: COPY on PostgreSQL (10 000
        rows in tens of milliseconds), a Core executemany elsewhere; never one ORM object per row."""
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

    def key_names(self, ids: set[int]) -> dict[int, str]:
        if not ids:
            return {}
        rows = self.session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.id.in_(ids))).all()
        return {key_id: name for key_id, name in rows}

    def _runs(self, f: RunFilters) -> Select[BenchmarkRun]:
        query = select(BenchmarkRun)
        if f.hardware is not None:
            query = query.where(BenchmarkRun.hardware == f.hardware)
        if f.timing_scope is not None:
            query = query.where(BenchmarkRun.timing_scope == f.timing_scope)
        if f.since is not None:
            query = query.where(BenchmarkRun.created_at >= f.since)
        if f.until is not None:
            query = query.where(BenchmarkRun.created_at < f.until)
        if f.software is not None:
            version = BenchmarkRun.software[f.software].as_string()
            query = query.where(version.is_not(None) if f.software_version is None else version == f.software_version)
        if f.op_kind is not None or f.dtype is not None:
            has = select(BenchmarkResult.id).where(BenchmarkResult.run_id == BenchmarkRun.id)
            if f.op_kind is not None:
                has = has.where(BenchmarkResult.op_kind == f.op_kind)
            if f.dtype is not None:
                has = has.where(BenchmarkResult.dtype == f.dtype)
            query = query.where(exists(has))
        return query

    def page_runs(self, f: RunFilters, limit: int, offset: int) -> tuple[list[BenchmarkRun], int]:
        query = self._runs(f)
        total = self.session.scalar(select(func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(query.order_by(BenchmarkRun.id.desc()).limit(limit).offset(offset)).all()
        return list(rows), total

    def page_results(
        self, run_id: int, op_kind: str | None, dtype: str | None, limit: int, offset: int
    ) -> tuple[list[BenchmarkResult], int]:
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
