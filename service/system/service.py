"""Whether the service can serve: its database answers and its catalogue is loaded."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from schemas.system import CatalogueCounts, Health
from service.catalogue.repository import CatalogueRepository
from service.errors import ServiceUnavailable
from service.orm import HardwareProfile, ModelConfig


def health(session: Session) -> Health:
    """The database answers and the catalogue's counts; a database that does not is a 503."""
    try:
        session.execute(text("SELECT 1"))
        counts = CatalogueCounts(
            hardware=CatalogueRepository(session, HardwareProfile).count(),
            models=CatalogueRepository(session, ModelConfig).count(),
        )
    except SQLAlchemyError as err:
        raise ServiceUnavailable(f"database unreachable: {type(err).__name__}") from None
    return Health(status="ok", database="ok", catalogue=counts)
