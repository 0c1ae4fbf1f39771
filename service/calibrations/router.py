"""HTTP routes for calibrations."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query

from schemas.calibrations import CalibrationCreate, CalibrationRead, ServingCalibrationRead
from schemas.common import Page
from service.auth import AUTH_RESPONSES, AdminDep, WriteSessionDep
from service.calibrations import service, serving
from service.deps import PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import CALIBRATION_EXAMPLES

router = APIRouter(
    prefix="/v1/calibrations",
    tags=["calibrations"],
    responses={**ERROR_RESPONSES, **AUTH_RESPONSES},
    route_class=OrjsonRoute,
)


@router.post("", status_code=201)
def create_calibration(
    session: WriteSessionDep,
    _admin: AdminDep,
    body: Annotated[CalibrationCreate, Body(openapi_examples=CALIBRATION_EXAMPLES)],
) -> CalibrationRead | ServingCalibrationRead:
    """Fit corrections from measured results (needs an admin key): per op family, or of serving estimates."""
    if body.kind == "serving":
        return serving.create(session, body)
    return service.create(session, body)


@router.get("/serving")
def list_serving_calibrations(
    session: SessionDep,
    paging: PagingDep,
    hardware: Annotated[str | None, Query(max_length=64)] = None,
) -> Page[ServingCalibrationRead]:
    """List serving calibrations, newest first."""
    items, total = serving.page(session, hardware, paging.limit, paging.offset)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/serving/{calibration_id}")
def get_serving_calibration(
    session: SessionDep, calibration_id: Annotated[int, Path(ge=1, le=2**31 - 1)]
) -> ServingCalibrationRead:
    """One serving calibration: its corrections and the held-out error before and after."""
    return serving.get(session, calibration_id)


@router.get("")
def list_calibrations(
    session: SessionDep,
    paging: PagingDep,
    hardware: Annotated[str | None, Query(max_length=64)] = None,
) -> Page[CalibrationRead]:
    """List calibrations, newest first."""
    items, total = service.page(session, hardware, paging.limit, paging.offset)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/{calibration_id}")
def get_calibration(session: SessionDep, calibration_id: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> CalibrationRead:
    """One calibration: what it was fitted on, its corrections, and its error before and after on held-out data."""
    return service.get(session, calibration_id)
