"""ORM models: every table of the service, in one place. Migrations are made from (and checked against) these."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, MetaData, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names, so migrations can refer to them on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSONDocument = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class CatalogueEntry:
    """Columns shared by hardware profiles and model configs: identity, filters, the document, provenance."""

    slug: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    builtin: Mapped[bool] = mapped_column(Boolean, default=False)
    # The validated document (the XCreate schema, minus the slug), as JSON.
    spec: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    # sha256 of the canonical JSON of `spec`: lets the catalogue load tell unchanged from updated.
    spec_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class HardwareProfile(CatalogueEntry, Base):
    __tablename__ = "hardware_profiles"

    vendor: Mapped[str] = mapped_column(String(20), index=True)
    kind: Mapped[str] = mapped_column(String(10), index=True)


class ModelConfig(CatalogueEntry, Base):
    __tablename__ = "model_configs"

    family: Mapped[str] = mapped_column(String(200), index=True)
