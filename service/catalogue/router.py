"""HTTP routes of a catalogue kind: list, get, create, merge-patch and delete, built once for hardware profiles
(`service.hardware.router`) and model configs (`service.models.router`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Response
from fastapi.openapi.models import Example

from schemas.common import Page
from schemas.limits import MAX_STORED_VERSION
from service.auth import AUTH_RESPONSES, CatalogueKeyDep, WriteSessionDep
from service.catalogue import service
from service.catalogue.service import C, CatalogueKind, E, R, References
from service.deps import PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES

# The unit of work of every catalogue write (create, merge-patch, delete; both kinds); each also takes the writer's
# key (`CatalogueKeyDep`: 401 without one, 403 below the catalogue scope), and the service checks the entry's owner.
CatalogueWriteDep = WriteSessionDep

_WRITE: dict[int | str, dict[str, Any]] = {
    401: AUTH_RESPONSES[401],
    403: ERROR_RESPONSES[400]
    | {"description": "The key's scope is below catalogue, or the entry is built-in (read-only) or another key's"},
}
_CREATE: dict[int | str, dict[str, Any]] = {
    401: AUTH_RESPONSES[401],
    403: AUTH_RESPONSES[403],
    409: ERROR_RESPONSES[400] | {"description": "Slug taken"},
}


def catalogue_router(
    kind: CatalogueKind[C, R, E],
    *,
    collection: str,
    item: str,
    page: Any,
    create: Any,
    filters: Callable[..., dict[str, str | None]],
    slug_description: str,
    document: str,
    patch_examples: dict[str, Example],
    get_summary: str,
    create_summary: str,
    before_slug: Mapping[str, Callable[..., Any]] | None = None,
    references: References | None = None,
) -> APIRouter:
    """The routes of `kind` under `/v1/{collection}`, tagged `collection`.

    The kind's own types are values: `page` its list's response model (`Page[HardwareRead]`), `create` the POST
    body's annotation (`Annotated[HardwareCreate, Body(openapi_examples=...)]`); `filters` is a dependency whose query
    parameters filter the list and which returns them as the catalogue's columns. `item` names the operations
    (`list_{collection}`, `get_{item}`, …: the OpenAPI operation ids), `document` the merge patch's target ("profile").
    `before_slug` maps paths to GET endpoints of this kind alone, matched before `/{slug}` would take the path for a
    slug. `references` says what stored data refers to an entry, which may then not be deleted (409)."""
    router = APIRouter(
        prefix=f"/v1/{collection}", tags=[collection], responses=ERROR_RESPONSES, route_class=OrjsonRoute
    )
    label = kind.label

    def list_items(session: SessionDep, filter_by: dict[str, str | None], paging: PagingDep) -> Page[R]:
        items, total = service.page(session, kind, filter_by, paging.limit, paging.offset)
        return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)

    def get_item(session: SessionDep, slug: str) -> R:
        return service.get(session, kind, slug)

    def get_item_version(session: SessionDep, slug: str, version: int) -> R:
        return service.get_version(session, kind, slug, version)

    def create_item(session: CatalogueWriteDep, key: CatalogueKeyDep, body: C) -> R:
        return service.create(session, kind, body, key)

    def update_item(session: CatalogueWriteDep, key: CatalogueKeyDep, slug: str, patch: dict[str, Any]) -> R:
        return service.update(session, kind, slug, patch, key)

    def delete_item(session: CatalogueWriteDep, key: CatalogueKeyDep, slug: str) -> Response:
        service.delete(session, kind, slug, key, references)
        return Response(status_code=204)

    # FastAPI reads an endpoint's parameters, and so the OpenAPI document, from its annotations: these take the kind's
    # own, which the `def`s above cannot name (their annotations are strings, looked up in this module).
    slug = Annotated[str, Path(max_length=64, description=slug_description)]
    list_items.__annotations__["filter_by"] = Annotated[dict[str, str | None], Depends(filters)]
    get_item.__annotations__["slug"] = slug
    get_item_version.__annotations__["slug"] = slug
    get_item_version.__annotations__["version"] = Annotated[
        int, Path(ge=1, le=MAX_STORED_VERSION, description="1, 2, …")
    ]
    create_item.__annotations__["body"] = create
    update_item.__annotations__["slug"] = slug
    update_item.__annotations__["patch"] = Annotated[
        dict[str, Any],
        Body(
            description=f"A JSON Merge Patch (RFC 7396) of the {document}: objects merge, null removes a field.",
            openapi_examples=patch_examples,
        ),
    ]
    delete_item.__annotations__["slug"] = slug

    # In the order the document lists them; `before_slug`'s paths come before `/{slug}`, which would take them.
    router.add_api_route(
        "",
        list_items,
        methods=["GET"],
        name=f"list_{collection}",
        response_model=page,
        description=f"List {label}s, built-in and user-added.",
    )
    for path, endpoint in (before_slug or {}).items():
        router.add_api_route(path, endpoint, methods=["GET"])
    router.add_api_route(
        "/{slug}", get_item, methods=["GET"], name=f"get_{item}", response_model=kind.read, description=get_summary
    )
    router.add_api_route(
        "/{slug}/versions/{version}",
        get_item_version,
        methods=["GET"],
        name=f"get_{item}_version",
        response_model=kind.read,
        description=f"One version of a {label}: the document stored results were predicted with then.",
    )
    router.add_api_route(
        "",
        create_item,
        methods=["POST"],
        name=f"create_{item}",
        response_model=kind.read,
        status_code=201,
        responses=_CREATE,
        description=create_summary,
    )
    router.add_api_route(
        "/{slug}",
        update_item,
        methods=["PATCH"],
        name=f"update_{item}",
        response_model=kind.read,
        responses=_WRITE,
        description=f"Change a user-added {label} (needs the key that made it, or an admin key): a new version.",
    )
    router.add_api_route(
        "/{slug}",
        delete_item,
        methods=["DELETE"],
        name=f"delete_{item}",
        status_code=204,
        responses=_WRITE
        | ({409: ERROR_RESPONSES[400] | {"description": "Stored data refers to it"}} if references else {}),
        description=f"Delete a user-added {label} (needs the key that made it, or an admin key).",
    )
    return router
