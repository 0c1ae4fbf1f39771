"""Load the built-in catalogue (hardware_db/) into the database: idempotent, safe to run concurrently."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from hardware_db import load_hardware, load_models
from service.catalogue.service import HARDWARE, MODELS, SyncReport, sync_builtin


def load_catalogue(factory: sessionmaker[Session]) -> dict[str, SyncReport]:
    return {
        "hardware": sync_builtin(factory, HARDWARE, load_hardware()),
        "models": sync_builtin(factory, MODELS, load_models()),
    }
