"""Queries over measured load tests and the serving calibrations fitted on them. No rules here: those live in
service.serving_benchmarks and service.calibrations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.orm import ApiKey, ServingBenchmark, ServingCalibration


@dataclass(frozen=True)
class Filters:
    hardware: str | None = None
    model: str | None = None
    engine: str | None = None


def _where(f: Filters) -> list[ColumnElement[bool]]:
    out: list[ColumnElement[bool]] = []
    if f.hardware is not None:
        out.append(ServingBenchmark.hardware == f.hardware)
    if f.model is not None:
        out.append(ServingBenchmark.model == f.model)
    if f.engine is not None:
        out.append(ServingBenchmark.engine == f.engine)
    return out


class ServingBenchmarkRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, bench_id: int) -> ServingBenchmark | None:
        return self.session.get(ServingBenchmark, bench_id)

    def by_idempotency_key(self, api_key_id: int, key: str) -> ServingBenchmark | None:
        return self.session.scalar(
            select(ServingBenchmark).where(
                ServingBenchmark.api_key_id == api_key_id, ServingBenchmark.idempotency_key == key
            )
        )

    def insert(self, values: dict[str, Any]) -> int | None:
        """The new row's id; None when a concurrent upload with the same key and Idempotency-Key stored it first
        (`INSERT … ON CONFLICT DO NOTHING`, as `service.benchmarks.service._insert_run`)."""
        table = ServingBenchmark.__table__
        assert isinstance(table, Table)
        dialect = self.session.get_bind().dialect.name
        stmt: Any
        if dialect == "postgresql":
            stmt = postgresql.insert(table).on_conflict_do_nothing(index_elements=["api_key_id", "idempotency_key"])
        elif dialect == "sqlite":
            stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=["api_key_id", "idempotency_key"])
        else:  # pragma: no cover - the service runs on these two
            raise RuntimeError(f"unsupported database {dialect}")
        new_id: int | None = self.session.execute(stmt.values(**values).returning(table.c.id)).scalar()
        return new_id

    def page(self, f: Filters, limit: int, offset: int) -> tuple[list[ServingBenchmark], int]:
        query = select(ServingBenchmark).where(*_where(f))
        total = self.session.scalar(select(func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(query.order_by(ServingBenchmark.id.desc()).limit(limit).offset(offset)).all()
        return list(rows), total

    def all(self, f: Filters) -> list[ServingBenchmark]:
        return list(self.session.scalars(select(ServingBenchmark).where(*_where(f)).order_by(ServingBenchmark.id)))

    def key_names(self, ids: set[int]) -> dict[int, str]:
        if not ids:
            return {}
        rows = self.session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.id.in_(ids))).all()
        return {key_id: name for key_id, name in rows}


class ServingCalibrationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, row: ServingCalibration) -> ServingCalibration:
        self.session.add(row)
        self.session.flush()
        return row

    def get(self, calibration_id: int) -> ServingCalibration | None:
        return self.session.get(ServingCalibration, calibration_id)

    def latest(self, hardware: str) -> ServingCalibration | None:
        query = select(ServingCalibration).where(ServingCalibration.hardware == hardware)
        return self.session.scalar(query.order_by(ServingCalibration.id.desc()).limit(1))

    def page(self, hardware: str | None, limit: int, offset: int) -> tuple[list[ServingCalibration], int]:
        query = select(ServingCalibration)
        if hardware is not None:
            query = query.where(ServingCalibration.hardware == hardware)
        total = self.session.scalar(select(func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(query.order_by(ServingCalibration.id.desc()).limit(limit).offset(offset)).all()
        return list(rows), total
