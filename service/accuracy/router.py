"""HTTP routes for accuracy reports."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from schemas.benchmarks import TimingScope
from schemas.calibrations import AccuracyRead
from schemas.common import Dtype
from schemas.limits import MAX_STORED_VERSION
from service.accuracy import service
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.results.repository import RunFilters

router = APIRouter(prefix="/v1/accuracy", tags=["benchmarks"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.get("")
def accuracy(
    session: SessionDep,
    hardware: Annotated[str | None, Query(max_length=64, description="Profile slug; default all.")] = None,
    hardware_version: Annotated[
        int | None,
        Query(ge=1, le=MAX_STORED_VERSION, description="Only results predicted with this version of the profile."),
    ] = None,
    op_kind: Annotated[str | None, Query(max_length=20, description="Op family (kind); default all.")] = None,
    dtype: Annotated[Dtype | None, Query()] = None,
    timing_scope: Annotated[TimingScope | None, Query()] = None,
    worst: Annotated[int, Query(ge=0, le=50, description="Worst cases listed per group.")] = 3,
) -> AccuracyRead:
    """Median and p90 absolute error and bias of the predictions, per op family, dtype and size, raw and calibrated.

    Each result is read against the prediction stored with it, made with the profile's version of its upload."""
    filters = RunFilters(
        hardware=hardware,
        hardware_version=hardware_version,
        op_kind=op_kind,
        dtype=dtype.value if dtype else None,
        timing_scope=timing_scope.value if timing_scope else None,
    )
    return service.report(session, filters, worst)
