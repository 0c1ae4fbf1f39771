"""HTTP routes for model configs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response

from schemas.common import Page
from schemas.models import ModelCreate, ModelRead
from service.catalogue import service
from service.catalogue.service import MODELS
from service.deps import PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import MODEL_CREATE_EXAMPLE, MODEL_PATCH_EXAMPLE

router = APIRouter(prefix="/v1/models", tags=["models"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)

SlugPath = Annotated[str, Path(max_length=64, description="Model slug, e.g. llama-3-8b.")]


@router.get("")
def list_models(
    session: SessionDep,
    paging: PagingDep,
    family: Annotated[str | None, Query(max_length=200, description="Only this family, e.g. llama-3.")] = None,
) -> Page[ModelRead]:
    """List model configs, built-in and user-added."""
    items, total = service.page(session, MODELS, {"family": family}, paging.limit, paging.offset)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/{slug}")
def get_model(session: SessionDep, slug: SlugPath) -> ModelRead:
    """One model config."""
    return service.get(session, MODELS, slug)


@router.post("", status_code=201, responses={409: ERROR_RESPONSES[400] | {"description": "Slug taken"}})
def create_model(
    session: SessionDep, body: Annotated[ModelCreate, Body(openapi_examples=MODEL_CREATE_EXAMPLE)]
) -> ModelRead:
    """Add a model config."""
    return service.create(session, MODELS, body)


@router.patch("/{slug}", responses={403: ERROR_RESPONSES[400] | {"description": "Built-in, read-only"}})
def update_model(
    session: SessionDep,
    slug: SlugPath,
    patch: Annotated[
        dict[str, Any],
        Body(
            description="A JSON Merge Patch (RFC 7396) of the config: objects merge, null removes a field.",
            openapi_examples=MODEL_PATCH_EXAMPLE,
        ),
    ],
) -> ModelRead:
    """Change a user-added model config."""
    return service.update(session, MODELS, slug, patch)


@router.delete(
    "/{slug}", status_code=204, responses={403: ERROR_RESPONSES[400] | {"description": "Built-in, read-only"}}
)
def delete_model(session: SessionDep, slug: SlugPath) -> Response:
    """Delete a user-added model config."""
    service.delete(session, MODELS, slug)
    return Response(status_code=204)
