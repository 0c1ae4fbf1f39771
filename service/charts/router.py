"""HTTP routes for charts: the roofline of a hardware profile with its measured results."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Path, Query, Response
from sqlalchemy.orm import Session

from schemas.benchmarks import TimingScope
from schemas.common import Dtype
from schemas.estimates import EstimateContext
from service.auth import AUTH_RESPONSES, ReaderDep
from service.benchmarks.repository import RunFilters
from service.calibrations.repository import CalibrationRepository
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE
from service.charts.roofline import MAX_POINTS, Points, Roofs, render
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.estimates.service import to_core

router = APIRouter(
    prefix="/v1/roofline", tags=["benchmarks"], responses={**ERROR_RESPONSES, **AUTH_RESPONSES}, route_class=OrjsonRoute
)

HardwarePath = Annotated[str, Path(max_length=64, description="Hardware slug, e.g. a100-sxm-80gb.")]
DtypeQuery = Annotated[Dtype, Query(description="The dtype whose peaks are drawn and whose results are plotted.")]
KindQuery = Annotated[str | None, Query(max_length=20, description="Only results of this op kind.")]
ScopeQuery = Annotated[TimingScope | None, Query(description="Only results of runs with this timing scope.")]


def _chart(
    session: Session, hardware: str, dtype: Dtype, op_kind: str | None, scope: TimingScope | None, fmt: str
) -> bytes:
    spec = catalogue.get_spec(session, HARDWARE, hardware)
    core = to_core(spec, EstimateContext(hardware=hardware))
    roofs = Roofs(
        name=spec.name,
        dtype=dtype.value,
        bandwidth_bytes_per_s=core.memory_bytes_per_s,
        matrix_flops_per_s=core.matrix_flops_per_s.get(dtype.value),
        vector_flops_per_s=core.vector_peak(dtype.value),
        eff_memory=core.eff_memory,
        eff_matrix=core.eff_matmul,
        eff_vector=core.eff_vector,
    )
    filters = RunFilters(
        hardware=hardware, dtype=dtype.value, op_kind=op_kind, timing_scope=scope.value if scope else None
    )
    data = CalibrationRepository(session).results(filters, None)
    flops = np.array([np.nan if v is None else v for v in data.flops], dtype=np.float64)
    nbytes = np.array([np.nan if v is None else v for v in data.bytes], dtype=np.float64)
    measured = np.asarray(data.median_s, dtype=np.float64)
    keep = np.flatnonzero((flops > 0) & (nbytes > 0))
    total = len(keep)
    if total > MAX_POINTS:  # an even sample, the same every time
        keep = keep[np.linspace(0, total - 1, MAX_POINTS).astype(int)]
    points = Points(
        intensity=(flops[keep] / nbytes[keep]).tolist(),
        achieved=(flops[keep] / measured[keep]).tolist(),
        family=[data.op_kind[i] for i in keep.tolist()],
        total=total,
    )
    return render(roofs, points, fmt)


@router.get(
    "/{hardware}.svg",
    response_class=Response,
    responses={200: {"content": {"image/svg+xml": {}}, "description": "The chart, SVG"}},
)
def roofline_svg(
    session: SessionDep,
    _reader: ReaderDep,
    hardware: HardwarePath,
    dtype: DtypeQuery = Dtype.bf16,
    op_kind: KindQuery = None,
    timing_scope: ScopeQuery = None,
) -> Response:
    """The roofline chart of a profile for a dtype, with measured results at their intensity and FLOP/s (SVG)."""
    return Response(_chart(session, hardware, dtype, op_kind, timing_scope, "svg"), media_type="image/svg+xml")


@router.get(
    "/{hardware}.png",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "The chart, PNG"}},
)
def roofline_png(
    session: SessionDep,
    _reader: ReaderDep,
    hardware: HardwarePath,
    dtype: DtypeQuery = Dtype.bf16,
    op_kind: KindQuery = None,
    timing_scope: ScopeQuery = None,
) -> Response:
    """The roofline chart of a profile for a dtype, with measured results at their intensity and FLOP/s (PNG)."""
    return Response(_chart(session, hardware, dtype, op_kind, timing_scope, "png"), media_type="image/png")
