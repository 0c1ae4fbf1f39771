"""Rules for collective estimates: on a catalogue or inline profile's own fabric, or an explicit topology; the mapping
to the core and back is `adapters`'. No formulas here."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.collectives import CollectiveRead, CollectiveRequest
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareSpec
from service import encoding
from service.catalogue import service as catalogue
from service.catalogue.loopread import LoopReads
from service.errors import invalid


# The op endpoint's hot path (`service.estimates.service.estimate_op` says why): on the event loop when one digest
# read there settles the profile, else one trip through the thread pool. The model built here is encoded where it was
# built, not validated a second time by FastAPI (tests/service/test_encoding.py checks the body).
async def estimate_collective(reads: LoopReads, body: CollectiveRequest) -> bytes:
    """One collective, as the JSON of a `CollectiveRead`."""
    context = _hardware_context(body)
    if context is None:
        return _json(adapters.estimate_collective(adapters.request_topology(body), None, body))
    resolved = await catalogue.resolve_hardware_on_loop(reads.digests, context)
    if resolved is not None:
        return _json(adapters.estimate_collective(*_on_device(body, *resolved), body))

    def work(session: Session) -> bytes:
        return _json(estimate(session, body))

    return await reads.in_session(work)


def _json(read: CollectiveRead) -> bytes:
    return encoding.dumps(read.model_dump(mode="json"))


def estimate(session: Session, body: CollectiveRequest) -> CollectiveRead:
    """One collective, its profile (if any) read through a session."""
    context = _hardware_context(body)
    if context is None:
        return adapters.estimate_collective(adapters.request_topology(body), None, body)
    return adapters.estimate_collective(*_on_device(body, *catalogue.resolve_hardware(session, context)), body)


def _hardware_context(body: CollectiveRequest) -> EstimateContext | None:
    """The profile a request names, as an estimate names it; None for an explicit topology. Its fabric's figures
    change only through `hardware_patch`."""
    if body.hardware is None:
        return None
    if body.link_bandwidth_bytes_per_s is not None or body.hop_latency_s is not None:
        field = "link_bandwidth_bytes_per_s" if body.link_bandwidth_bytes_per_s is not None else "hop_latency_s"
        raise invalid(f"body.{field}", "with hardware, change the profile's figures through hardware_patch")
    return EstimateContext.model_construct(hardware=body.hardware, hardware_patch=body.hardware_patch)


def _on_device(body: CollectiveRequest, spec: HardwareSpec, name: str) -> tuple[roofline.Topology, str]:
    return adapters.request_device_topology(body, spec), name
