"""HTTP routes for request traces."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from schemas.common import Page
from schemas.traces import TRACE_ID_PATTERN, TraceCreate, TraceRead, TraceRequest
from service.auth import AUTH_RESPONSES, UploaderDep
from service.deps import PagingDep, SessionDep, in_unit_of_work
from service.encoding import ORJSONResponse, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import TRACE_UPLOAD_EXAMPLES
from service.traces import service

# OrjsonRoute for its parameters' checks (a NUL character in `name`); the upload reads its body itself.
router = APIRouter(prefix="/v1/traces", tags=["traces"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)

TraceIdPath = Annotated[
    str,
    Path(
        pattern=TRACE_ID_PATTERN,
        min_length=27,
        max_length=27,
        description="A trace id, e.g. tr_0123456789abcdef01234567.",
    ),
]

# One body, four media types: FastAPI cannot declare that from a parameter, so the OpenAPI document gets it here. The
# JSON document's schema refers to TraceRequest's component, which the other routes already declare.
_DOCUMENT = {k: v for k, v in TraceCreate.model_json_schema(ref_template="#/components/schemas/{model}").items()
             if k != "$defs"}  # fmt: skip
_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The trace: Ridgeline's JSON document, or a CSV or JSON Lines file in one of the recognised "
        "column sets (docs/api.md, Traces). Arrivals never go backwards; at most 100 000 requests.",
        "content": {
            media: {"schema": schema, "examples": TRACE_UPLOAD_EXAMPLES[media]}
            for media, schema in (
                ("application/json", _DOCUMENT),
                ("text/csv", {"type": "string"}),
                ("application/x-ndjson", {"type": "string"}),
            )
        },
    }
}


@router.post(
    "",
    status_code=201,
    response_model=TraceRead,
    openapi_extra=_UPLOAD_BODY,
    summary="Store a request trace (JSON, CSV or JSON Lines) to replay in serving estimates as load.trace_id",
    description="Ridgeline's JSON document, or a trace file as published: CSV with `arrival_s, prompt_tokens, "
    "output_tokens`, the Azure LLM inference traces (`TIMESTAMP, ContextTokens, GeneratedTokens`) or BurstGPT "
    "(`Timestamp, Request tokens, Response tokens`); JSON Lines with Ridgeline's keys or Mooncake's (`timestamp` in "
    "ms, `input_length`, `output_length`). The same requests are stored once: their digest is the id (201 when new, "
    "200 with the stored trace when not). Arrivals are kept from the first request. Needs an upload key; the key "
    "that first stored the requests owns the trace.",
    responses={
        200: {
            "model": TraceRead,
            "description": "These requests were stored before: the stored trace (its first name)",
        },
        **AUTH_RESPONSES,
        415: ERROR_RESPONSES[400] | {"description": "Not a trace's media type"},
    },
)
async def upload_trace(
    request: Request,
    key: UploaderDep,
    name: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            pattern=r"\S",
            description="The trace's name (a file's; overrides a JSON document's own).",
        ),
    ] = None,
) -> Response:
    """Store a request trace (JSON, CSV or JSON Lines) to replay in serving estimates as `load.trace_id`."""
    body = await request.body()
    trace = await run_in_threadpool(service.parse, body, request.headers.get("content-type"), name)
    read, created = await in_unit_of_work(request, lambda session: service.store(session, trace, key))
    return ORJSONResponse(read.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("")
def list_traces(session: SessionDep, paging: PagingDep) -> Page[TraceRead]:
    """List stored traces, newest first."""
    items, total = service.page(session, paging.limit, paging.offset)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/{trace_id}")
def get_trace(session: SessionDep, trace_id: TraceIdPath) -> TraceRead:
    """One stored trace: its requests' count, span, mean rate and lengths."""
    return service.get(session, trace_id)


@router.get("/{trace_id}/requests", response_model_exclude_none=True)
def trace_requests(session: SessionDep, trace_id: TraceIdPath, paging: PagingDep) -> Page[TraceRequest]:
    """A stored trace's requests as they are replayed (arrivals from the first request), in order; what a request
    shares (prefix_hashes, session, turn) only where the trace has it."""
    return service.requests_page(session, trace_id, paging.limit, paging.offset)


@router.delete(
    "/{trace_id}",
    status_code=204,
    responses={
        401: AUTH_RESPONSES[401],
        403: ERROR_RESPONSES[400] | {"description": "The key's scope is below upload, or another key stored the trace"},
    },
)
def delete_trace(session: SessionDep, key: UploaderDep, trace_id: TraceIdPath) -> Response:
    """Delete a stored trace (needs the key that stored it, or an admin key)."""
    service.delete(session, trace_id, key)
    return Response(status_code=204)
