"""HTTP routes for model configs: the catalogue's routes (`service.catalogue.router`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Query

from schemas.common import Page
from schemas.models import ModelCreate, ModelRead
from service.catalogue.router import catalogue_router
from service.catalogue.service import MODELS
from service.examples import MODEL_CREATE_EXAMPLE, MODEL_PATCH_EXAMPLE


def _filters(
    family: Annotated[str | None, Query(max_length=200, description="Only this family, e.g. llama-3.")] = None,
) -> dict[str, str | None]:
    """The list's filters, as the catalogue's columns."""
    return {"family": family}


router = catalogue_router(
    MODELS,
    collection="models",
    item="model",
    page=Page[ModelRead],
    create=Annotated[ModelCreate, Body(openapi_examples=MODEL_CREATE_EXAMPLE)],
    filters=_filters,
    slug_description="Model slug, e.g. llama-3-8b.",
    document="config",
    patch_examples=MODEL_PATCH_EXAMPLE,
    get_summary="One model config.",
    create_summary="Add a model config (needs a catalogue key).",
)
