"""HTTP routes for charts: the roofline of a hardware profile with its measured results, as SVG or PNG."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from schemas.benchmarks import TimingScope
from schemas.common import Dtype
from service.charts import service
from service.charts.formats import ChartEndpoint, ImageFormat, chart_routes
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/roofline", tags=["benchmarks"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)

HardwarePath = Annotated[str, Path(max_length=64, description="Hardware slug, e.g. a100-sxm-80gb.")]
DtypeQuery = Annotated[Dtype, Query(description="The dtype whose peaks are drawn and whose results are plotted.")]
KindQuery = Annotated[str | None, Query(max_length=20, description="Only results of this op kind.")]
ScopeQuery = Annotated[TimingScope | None, Query(description="Only results of runs with this timing scope.")]


@chart_routes(router, "GET", "/{hardware}")
def roofline(fmt: ImageFormat) -> ChartEndpoint:
    """The roofline chart of a profile for a dtype, with measured results at their intensity and FLOP/s."""

    def draw(
        session: SessionDep,
        hardware: HardwarePath,
        dtype: DtypeQuery = Dtype.bf16,
        op_kind: KindQuery = None,
        timing_scope: ScopeQuery = None,
    ) -> Response:
        return fmt.response(service.chart(session, hardware, dtype, op_kind, timing_scope, fmt.suffix))

    return draw
