"""HTTP routes of jobs: submit, read, list, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Body, Path, Query, Request, Response

from schemas.common import Page
from schemas.jobs import JobCreate, JobKind, JobRead, JobState
from service.auth import AUTH_RESPONSES, ViewerDep, WriteSessionDep
from service.deps import PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.jobs import service
from service.jobs.http import ACCEPTED, IdempotencyKey, accepted

router = APIRouter(
    prefix="/v1/jobs", tags=["jobs"], responses={**ERROR_RESPONSES, **AUTH_RESPONSES}, route_class=OrjsonRoute
)
JobId = Annotated[str, Path(min_length=1, max_length=32, pattern="^[0-9a-f]+$", description="The job's id.")]

JOB_EXAMPLES = {
    "serving": {
        "summary": "A serving estimate as a job",
        "value": {
            "kind": "estimate_serving",
            "body": {
                "model": "llama-3-8b",
                "hardware": "h100-sxm",
                "load": {
                    "concurrency": 8,
                    "requests": 200,
                    "prompt_tokens": {"kind": "fixed", "value": 512},
                    "output_tokens": {"kind": "fixed", "value": 64},
                },
            },
        },
    }
}


@router.post("", status_code=202, response_model=JobRead, responses=ACCEPTED)
def submit(
    request: Request,
    session: WriteSessionDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: Annotated[JobCreate, Body(openapi_examples=JOB_EXAMPLES)],
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Submit a long computation as a job: `kind` and the `body` its synchronous endpoint takes; 202 and `Location`."""
    parsed = service.validate(request.app.state.job_kinds, body.kind, body.body)
    return accepted(request, session, background, body.kind, parsed, principal, idempotency_key, False)


@router.get("/{job_id}")
def get_job(session: SessionDep, job_id: JobId) -> JobRead:
    """A job: its state, progress, and its result (or error) once finished."""
    return service.read(service.get(session, job_id))


@router.get("")
def list_jobs(
    session: SessionDep,
    principal: ViewerDep,
    paging: PagingDep,
    kind: Annotated[JobKind | None, Query(description="Only jobs of this kind.")] = None,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
) -> Page[JobRead]:
    """The caller's jobs, newest first (an admin key: everyone's; no key: those submitted without one)."""
    items, total = service.page(session, principal, kind, state, paging.limit, paging.offset)
    return Page[JobRead](items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.delete("/{job_id}")
def cancel_job(session: WriteSessionDep, principal: ViewerDep, job_id: JobId) -> JobRead:
    """Cancel a queued or running job: its Ray tasks are stopped. A finished job is left as it is."""
    return service.read(service.cancel(session, job_id, principal))
