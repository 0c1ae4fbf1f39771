"""Queries for stored request traces. No rules here: those live in service.py."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, defer

from service.orm import ServingTrace


class TraceRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def insert(self, values: dict[str, Any]) -> bool:
        """Store a trace unless one with its id (the digest of its columns) exists: False when it did. Racing uploads
        of the same trace are safe: ON CONFLICT DO NOTHING, and on PostgreSQL the loser waits for the winner's
        transaction, then does nothing."""
        table = ServingTrace.__table__
        assert isinstance(table, Table)
        dialect = self.session.get_bind().dialect.name
        stmt: Any
        if dialect == "postgresql":
            stmt = postgresql.insert(table).on_conflict_do_nothing(index_elements=["id"])
        elif dialect == "sqlite":
            stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=["id"])
        else:  # pragma: no cover - the service runs on these two
            raise RuntimeError(f"unsupported database {dialect}")
        inserted = self.session.execute(stmt.values(**values).returning(table.c.id)).scalar()
        return inserted is not None

    def get(self, trace_id: str, *, with_data: bool = False) -> ServingTrace | None:
        query = select(ServingTrace).where(ServingTrace.id == trace_id)
        if not with_data:
            query = query.options(defer(ServingTrace.data))
        return self.session.scalar(query)

    def page(self, limit: int, offset: int) -> tuple[list[ServingTrace], int]:
        """Newest first, without the columns (a list shows summaries)."""
        total = self.session.scalar(select(func.count()).select_from(ServingTrace)) or 0
        rows = self.session.scalars(
            select(ServingTrace)
            .options(defer(ServingTrace.data))
            .order_by(ServingTrace.created_at.desc(), ServingTrace.id)
            .limit(limit)
            .offset(offset)
        ).all()
        return list(rows), total

    def delete(self, trace_id: str) -> bool:
        result = self.session.execute(delete(ServingTrace).where(ServingTrace.id == trace_id))
        return bool(getattr(result, "rowcount", 0))
