"""HTTP routes for hardware profiles: the catalogue's routes (`service.catalogue.router`) and the device resolver."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Query

from schemas.benchmarks import HardwareResolution
from schemas.common import Page
from schemas.hardware import DeviceKind, HardwareCreate, HardwareRead, Vendor
from service.catalogue import devices
from service.catalogue.router import catalogue_router
from service.catalogue.service import HARDWARE
from service.deps import SessionDep
from service.examples import HARDWARE_CREATE_EXAMPLE, HARDWARE_PATCH_EXAMPLE
from service.hardware.service import references


def _filters(
    vendor: Annotated[Vendor | None, Query(description="Only this vendor.")] = None,
    kind: Annotated[DeviceKind | None, Query(description="Only this kind of device.")] = None,
) -> dict[str, str | None]:
    """The list's filters, as the catalogue's columns."""
    return {"vendor": vendor.value if vendor else None, "kind": kind.value if kind else None}


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


router = catalogue_router(
    HARDWARE,
    collection="hardware",
    item="hardware",
    page=Page[HardwareRead],
    create=Annotated[HardwareCreate, Body(openapi_examples=HARDWARE_CREATE_EXAMPLE)],
    filters=_filters,
    slug_description="Hardware slug, e.g. h100-sxm.",
    document="profile",
    patch_examples=HARDWARE_PATCH_EXAMPLE,
    get_summary="One hardware profile with the source of every figure.",
    create_summary="Add a hardware profile (needs a catalogue key); every figure needs a source.",
    before_slug={"/resolve": resolve_device},
    references=references,
)
