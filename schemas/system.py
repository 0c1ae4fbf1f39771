"""Health and liveness answers."""

from __future__ import annotations

from pydantic import BaseModel


class Pong(BaseModel):
    pong: bool


class CatalogueCounts(BaseModel):
    hardware: int
    models: int


class Health(BaseModel):
    status: str
    database: str
    catalogue: CatalogueCounts
