"""Rules for request traces: which upload formats are taken, how a trace is stored (once, by the digest of its
requests) and read back for serving estimates. Parsing and checking the files is `adapters`' (`parse_trace`)."""

from __future__ import annotations

import orjson
from sqlalchemy.orm import Session

import adapters
from schemas.common import ErrorDetail, Page
from schemas.traces import TraceCreate, TraceFormat, TraceRead, TraceRequest
from service.auth import Principal, check_owner
from service.errors import NotFound, UnsupportedMediaType, invalid
from service.orm import ServingTrace, utcnow
from service.traces.repository import TraceRepository

JSON_TYPE = "application/json"
UPLOAD_TYPES = (JSON_TYPE, *adapters.TRACE_FILE_TYPES)


def parse(body: bytes, content_type: str | None, name: str | None) -> adapters.Trace:
    """The trace an upload carries: Ridgeline's JSON document (`TraceCreate`) or a trace file (CSV, JSON Lines).
    `name` (the query's) names a file's trace, and overrides a document's own name."""
    kind = adapters.media_type(content_type)
    if kind == JSON_TYPE:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as err:
            raise invalid("body", f"not JSON: {err}", "json_invalid") from None
        adapters.check_json(body, doc)  # nesting, NUL characters: a 422 naming the field
        create = TraceCreate.model_validate(doc)  # a ValidationError is a 422 naming body.<field>
        return adapters.trace_of(
            name or create.name,
            TraceFormat.json,
            [r.arrival_s for r in create.requests],
            [r.prompt_tokens for r in create.requests],
            [r.output_tokens for r in create.requests],
            shared=adapters.shared_columns(create.requests, create.hash_block_tokens),
        )
    if kind in adapters.TRACE_FILE_TYPES:
        return adapters.parse_trace(body, kind, name or "trace")
    raise UnsupportedMediaType(
        f"Content-Type {kind or '(none)'!r} is not a trace: send one of {', '.join(UPLOAD_TYPES)}."
    )


def _read(row: ServingTrace) -> TraceRead:
    return TraceRead.model_validate(
        {"id": row.id, "name": row.name, "format": row.format, "created_at": row.created_at, **row.summary}
    )


def store(session: Session, trace: adapters.Trace, owner: Principal) -> tuple[TraceRead, bool]:
    """Store a trace, owned by the key `owner`; the stored one and whether it is new (the same requests uploaded
    before are not stored again, and keep their first name and owner)."""
    repo = TraceRepository(session)
    summary = trace.summary()
    created = repo.insert(
        {
            "id": trace.id,
            "name": trace.name,
            "format": trace.format.value,
            "requests": summary["requests"],
            "summary": summary,
            "data": trace.encode(),
            "owner_key_id": owner.key_id,
            "created_at": utcnow(),
        }
    )
    row = repo.get(trace.id)
    assert row is not None  # inserted, or there already
    return _read(row), created


def get(session: Session, trace_id: str) -> TraceRead:
    row = TraceRepository(session).get(trace_id)
    if row is None:
        raise NotFound(f"No trace with id {trace_id!r}.")
    return _read(row)


def page(session: Session, limit: int, offset: int) -> tuple[list[TraceRead], int]:
    rows, total = TraceRepository(session).page(limit, offset)
    return [_read(row) for row in rows], total


def load(session: Session, trace_id: str, field: str | None = None) -> adapters.Trace:
    """A stored trace's requests, as the serving simulator replays them; `field`: the request field that named it,
    for the 404's detail."""
    row = TraceRepository(session).get(trace_id, with_data=True)
    if row is None:
        message = f"No trace with id {trace_id!r}: upload it with POST /v1/traces."
        detail = [ErrorDetail(field=field, message=message, type="not_found")] if field else None
        raise NotFound(message, detail)
    return adapters.decode_trace(row.name, row.format, row.data)


def requests_page(session: Session, trace_id: str, limit: int, offset: int) -> Page[TraceRequest]:
    trace = load(session, trace_id)
    stop = min(offset + limit, len(trace.arrival_s))
    items = [
        TraceRequest(
            arrival_s=float(trace.arrival_s[i]),
            prompt_tokens=int(trace.prompt_tokens[i]),
            output_tokens=int(trace.output_tokens[i]),
            **adapters.request_fields(trace.sharing, i),
        )
        for i in range(offset, stop)
    ]
    return Page(items=items, total=len(trace.arrival_s), limit=limit, offset=offset)


def delete(session: Session, trace_id: str, principal: Principal) -> None:
    repo = TraceRepository(session)
    row = repo.get(trace_id)
    if row is None:
        raise NotFound(f"No trace with id {trace_id!r}.")
    check_owner(principal, row.owner_key_id, f"trace {trace_id!r}")
    repo.delete(trace_id)
