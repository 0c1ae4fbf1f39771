"""Queries over benchmark runs. No rules here: those live in service.py; the runs' results are
`service.results.repository`'s."""

from __future__ import annotations

from sqlalchemy import Select, exists, func, select
from sqlalchemy.orm import Session

from service.orm import ApiKey, BenchmarkResult, BenchmarkRun
from service.results.repository import RunFilters, run_conditions


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

    def key_names(self, ids: set[int]) -> dict[int, str]:
        if not ids:
            return {}
        rows = self.session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.id.in_(ids))).all()
        return {key_id: name for key_id, name in rows}

    def _runs(self, f: RunFilters) -> Select[BenchmarkRun]:
        query = select(BenchmarkRun).where(*run_conditions(f))
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
