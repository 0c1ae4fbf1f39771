"""The roofline chart of a hardware profile: its roofs as the core sees them (`adapters.to_core`), with the profile's
measured results plotted on them (`service.results`)."""

from __future__ import annotations

import numpy as np
from sqlalchemy.orm import Session

import adapters
from schemas.benchmarks import TimingScope
from schemas.common import Dtype
from schemas.estimates import EstimateContext
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE
from service.charts.roofline import MAX_POINTS, Points, Roofs, render
from service.results.repository import ResultRepository, RunFilters


def chart(
    session: Session, hardware: str, dtype: Dtype, op_kind: str | None, scope: TimingScope | None, fmt: str
) -> bytes:
    """The chart of profile `hardware` for `dtype`, with its results of this op kind and timing scope, as `fmt`
    ("svg" or "png") bytes."""
    spec = catalogue.get_spec(session, HARDWARE, hardware, "path.hardware")
    core = adapters.to_core(spec, EstimateContext(hardware=hardware))
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
    data = ResultRepository(session).columns(filters, None)
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
