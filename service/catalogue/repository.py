"""Queries over catalogue tables. No rules here: those live in service.py."""

from __future__ import annotations

import functools
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.orm import Session

from service.orm import CatalogueVersion, HardwareProfile, HardwareProfileVersion, ModelConfig, ModelConfigVersion

E = TypeVar("E", HardwareProfile, ModelConfig)
Versions = type[HardwareProfileVersion] | type[ModelConfigVersion]


class CatalogueRepository(Generic[E]):
    def __init__(self, session: Session, table: type[E]) -> None:
        self.session = session
        self.table: type[E] = table

    def get(self, slug: str) -> E | None:
        return self.session.get(self.table, slug)

    def get_for_update(self, slug: str) -> E | None:
        """The entry, its row locked until the transaction ends (PostgreSQL; SQLite lets one writer at a time)."""
        return self.session.scalar(
            select(self.table)
            .where(self.table.slug == slug)
            .with_for_update()
            .execution_options(populate_existing=True)
        )

    def current_version(self, slug: str) -> int | None:
        return self.session.scalar(select(self.table.version).where(self.table.slug == slug))

    def version_for_share(self, slug: str) -> int | None:
        """The entry's version, its row share-locked until the transaction ends: updates and deletes wait."""
        return self.session.scalar(select(self.table.version).where(self.table.slug == slug).with_for_update(read=True))

    def version(self, versions: Versions, slug: str, version: int) -> CatalogueVersion | None:
        return cast(CatalogueVersion | None, self.session.get(versions, (slug, version)))

    def add_version(self, versions: Versions, entry: E) -> None:
        """Keep the entry's current document as its version."""
        self.session.add(
            versions(slug=entry.slug, version=entry.version, spec=entry.spec, spec_sha256=entry.spec_sha256)
        )
        self.session.flush()

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
