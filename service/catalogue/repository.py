"""Queries over catalogue tables. No rules here: those live in service.py."""

from __future__ import annotations

import functools
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.orm import Session

from service.orm import HardwareProfile, ModelConfig

E = TypeVar("E", HardwareProfile, ModelConfig)


class CatalogueRepository(Generic[E]):
    def __init__(self, session: Session, table: type[E]) -> None:
        self.session = session
        self.table: type[E] = table

    def get(self, slug: str) -> E | None:
        return self.session.get(self.table, slug)

    def digest(self, slug: str) -> str | None:
        """The entry's `spec_sha256` alone: what a cached parse of its document is checked against. A Core statement
        built once per table: every estimate runs this, and the ORM's select costs three times as much."""
        return self.session.scalar(_digest_statement(self.table), {"slug": slug})

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


@functools.cache
def _digest_statement(table: type[HardwareProfile] | type[ModelConfig]) -> Select[str]:
    columns = table.__table__.c
    return select(columns.spec_sha256).where(columns.slug == bindparam("slug"))
