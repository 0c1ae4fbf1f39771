"""HTTP routes for hardware profiles."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response

from schemas.benchmarks import HardwareResolution
from schemas.common import Page
from schemas.hardware import DeviceKind, HardwareCreate, HardwareRead, Vendor
from service.catalogue import devices, service
from service.catalogue.service import HARDWARE
from service.deps import PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import HARDWARE_CREATE_EXAMPLE, HARDWARE_PATCH_EXAMPLE

router = APIRouter(prefix="/v1/hardware", tags=["hardware"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)

SlugPath = Annotated[str, Path(max_length=64, description="Hardware slug, e.g. h100-sxm.")]


@router.get("")
def list_hardware(
    session: SessionDep,
    paging: PagingDep,
    vendor: Annotated[Vendor | None, Query(description="Only this vendor.")] = None,
    kind: Annotated[DeviceKind | None, Query(description="Only this kind of device.")] = None,
) -> Page[HardwareRead]:
    """List hardware profiles, built-in and user-added."""
    filters = {"vendor": vendor.value if vendor else None, "kind": kind.value if kind else None}
    items, total = service.page(session, HARDWARE, filters, paging.limit, paging.offset)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


# Before /{slug}, which would otherwise take "resolve" for a slug.
@router.get("/resolve")
def resolve_device(
    session: SessionDep,
    device: Annotated[
        str,
        Query(
            min_length=1,
            max_length=200,
            description="What the device calls itself: `NVIDIA H100 80GB HBM3`, `TPU v5 lite`, `cpu`, or a slug.",
        ),
    ],
) -> HardwareResolution:
    """The catalogue profile a device description maps to (what workers call before uploading)."""
    return devices.resolve(session, device)


@router.get("/{slug}")
def get_hardware(session: SessionDep, slug: SlugPath) -> HardwareRead:
    """One hardware profile with the source of every figure."""
    return service.get(session, HARDWARE, slug)


@router.post("", status_code=201, responses={409: ERROR_RESPONSES[400] | {"description": "Slug taken"}})
def create_hardware(
    session: SessionDep, body: Annotated[HardwareCreate, Body(openapi_examples=HARDWARE_CREATE_EXAMPLE)]
) -> HardwareRead:
    """Add a hardware profile; every figure needs a source."""
    return service.create(session, HARDWARE, body)


@router.patch("/{slug}", responses={403: ERROR_RESPONSES[400] | {"description": "Built-in, read-only"}})
def update_hardware(
    session: SessionDep,
    slug: SlugPath,
    patch: Annotated[
        dict[str, Any],
        Body(
            description="A JSON Merge Patch (RFC 7396) of the profile: objects merge, null removes a field.",
            openapi_examples=HARDWARE_PATCH_EXAMPLE,
        ),
    ],
) -> HardwareRead:
    """Change a user-added hardware profile."""
    return service.update(session, HARDWARE, slug, patch)


@router.delete(
    "/{slug}", status_code=204, responses={403: ERROR_RESPONSES[400] | {"description": "Built-in, read-only"}}
)
def delete_hardware(session: SessionDep, slug: SlugPath) -> Response:
    """Delete a user-added hardware profile."""
    service.delete(session, HARDWARE, slug)
    return Response(status_code=204)
