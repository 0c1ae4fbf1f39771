"""HTTP route for collective estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.collectives import CollectiveRead, CollectiveRequest
from service.collectives import service
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES
from service.examples import COLLECTIVE_EXAMPLES

router = APIRouter(prefix="/v1/estimate", tags=["collectives"], responses=ERROR_RESPONSES)


@router.post("/collective")
def estimate_collective(
    session: SessionDep, body: Annotated[CollectiveRequest, Body(openapi_examples=COLLECTIVE_EXAMPLES)]
) -> CollectiveRead:
    """Estimate a collective (all-reduce, all-gather, …) on a device's own fabric or an explicit topology."""
    return service.estimate(session, body)
