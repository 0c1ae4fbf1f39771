"""One settings class for the service process, read from the environment with the RIDGELINE_ prefix."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RIDGELINE_", extra="ignore")

    # `DATABASE_URL` is honoured too: it is what docker compose and most platforms set.
    database_url: str = Field(
        default="sqlite:///ridgeline.db",
        validation_alias=AliasChoices("RIDGELINE_DATABASE_URL", "DATABASE_URL"),
    )
    load_catalogue_on_start: bool = True
    max_page_size: int = Field(default=500, gt=0)
    db_pool_size: int = Field(default=5, gt=0)
    log_level: str = "info"
    # Benchmark, accuracy, roofline and calibration reads need an API key (any scope) when set.
    read_requires_key: bool = False


def normalise_database_url(url: str) -> str:
    """Plain `postgresql://` URLs (as platforms hand them out) use psycopg 3, the driver we ship."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url
