"""Queries over catalogue tables. No rules here: those live in service.py."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.orm import HardwareProfile, ModelConfig

E = TypeVar("E", HardwareProfile, ModelConfig)


class CatalogueRepository(Generic[E]):
    def __init__(self, session: Session, table: type[E]) -> None:
        self.session = session
        self.table: type[E] = table

    def get(self, slug: str) -> E | None:
        return self.session.get(self.table, slug)

    def page(self, filters: dict[str, Any], limit: int, offset: int) -> tuple[list[E], int]:
        where = [getattr(self.table, column) == value for column, value in filters.items() if value is not None]
        total = self.session.scalar(select(func.count()).select_from(self.table).where(*where)) or 0
        rows = self.session.scalars(
            select(self.table).where(*where).order_by(self.table.slug).limit(limit).offset(offset)
        ).all()
        return list(rows), total

    def all_builtin(self) -> dict[str, E]:
        rows = self.session.scalars(select(self.table).where(self.table.builtin.is_(True))).all()
        return {row.slug: row for row in rows}

    def add(self, entry: E) -> None:
        self.session.add(entry)
        self.session.flush()

    def delete(self, entry: E) -> None:
        self.session.delete(entry)
        self.session.flush()

    def count(self) -> int:
        return self.session.scalar(select(func.count()).select_from(self.table)) or 0
