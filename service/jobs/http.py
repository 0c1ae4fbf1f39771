"""What the long endpoints share with `POST /v1/jobs`: `Prefer: respond-async` (RFC 7240) and the 202 that answers
it (or a request past the size a request answers) with the job's `Location` (`accepted`, or `accept` from the heavy
endpoints, which are `async`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import BackgroundTasks, Header, Request, Response
from pydantic import BaseModel
from sqlalchemy.orm import Session

from schemas.common import ErrorEnvelope
from schemas.jobs import JobKind, JobRead
from service.auth import Principal
from service.deps import in_unit_of_work
from service.encoding import ORJSONResponse
from service.jobs import service

PreferHeader = Annotated[
    str | None,
    Header(
        alias="Prefer",
        max_length=200,
        description="`respond-async` (RFC 7240): run the request as a job and answer 202 with its `Location` "
        "(`GET /v1/jobs/{id}`).",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="With a job: a retry with the same key and body gets the same job; the same key with another "
        "body is a 409.",
    ),
]

_HEADERS = {
    "Location": {"description": "The job: `/v1/jobs/{id}`", "schema": {"type": "string"}},
    "Preference-Applied": {
        "description": "`respond-async` when the request asked for it",
        "schema": {"type": "string"},
    },
}
ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {
        "model": JobRead,
        "description": "Run as a job (asked with `Prefer: respond-async`, or too big to answer within a request): "
        "its state at `Location`, and there the answer once it has finished.",
        "headers": _HEADERS,
    },
    409: {"model": ErrorEnvelope, "description": "Idempotency-Key reused with another body"},
}


def wants_async(prefer: str | None) -> bool:
    """Whether a `Prefer` header holds the `respond-async` preference (RFC 7240 §4.1: comma-separated preferences,
    each with optional `;` parameters, names case-insensitive)."""
    if not prefer:
        return False
    return any(p.split(";")[0].split("=")[0].strip().lower() == "respond-async" for p in prefer.split(","))


def accepted(
    request: Request, session: Session, background: BackgroundTasks, kind: JobKind, body: BaseModel,
    principal: Principal | None, idempotency_key: str | None, applied: bool,
) -> Response:  # fmt: skip
    """Submit `body` as a job of `kind` and answer 202 with its `Location` (and `Preference-Applied` when the
    request asked). The runner is woken once the unit of work has committed (a background task runs after it)."""
    job, replayed = service.submit(session, kind, body, principal, idempotency_key)
    session.flush()
    background.add_task(request.app.state.jobs.wake)
    headers = {"Location": f"/v1/jobs/{job.id}"}
    if applied:
        headers["Preference-Applied"] = "respond-async"
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return ORJSONResponse(
        status_code=202, content=service.read(job).model_dump(mode="json"), headers=headers, background=background
    )


async def accept(
    request: Request, background: BackgroundTasks, kind: JobKind, body: BaseModel, principal: Principal | None,
    idempotency_key: str | None, applied: bool,
) -> Response:  # fmt: skip
    """`accepted`, from an `async` endpoint (the heavy ones, which hold no session of their own): the submission in
    its own unit of work, committed before the 202 is sent. A submission is cheap: it takes no heavy slot and no
    heavy rate (`service.heavy`); the job's compute runs on Ray, bounded by the job limits (`schemas.limits`)."""
    return await in_unit_of_work(
        request, lambda session: accepted(request, session, background, kind, body, principal, idempotency_key, applied)
    )
