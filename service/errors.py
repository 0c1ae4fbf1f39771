"""Errors as exceptions that carry their status, rendered as one JSON envelope (schemas.ErrorEnvelope)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from adapters import InvalidField
from schemas.common import ErrorDetail, ErrorEnvelope
from service.encoding import ORJSONResponse, RefusedInput

log = logging.getLogger("ridgeline")


class RidgelineError(Exception):
    """Base of every error the service raises on purpose."""

    status_code = 400
    code = "bad_request"

    def __init__(
        self, message: str, detail: list[ErrorDetail] | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or []
        self.headers = headers or {}  # e.g. Retry-After on a 429 or 503


class NotFound(RidgelineError):
    status_code = 404
    code = "not_found"


class Conflict(RidgelineError):
    status_code = 409
    code = "conflict"


class ReadOnly(RidgelineError):
    status_code = 403
    code = "read_only"


class Unprocessable(RidgelineError):
    status_code = 422
    code = "validation_error"


class UnsupportedMediaType(RidgelineError):
    status_code = 415
    code = "unsupported_media_type"


class ServiceUnavailable(RidgelineError):
    status_code = 503
    code = "unavailable"


class TooManyRequests(RidgelineError):
    """A rate limit was reached; `Retry-After` says when the same request will be accepted."""

    status_code = 429
    code = "too_many_requests"


# How long a client should wait when the database is unreachable: long enough that a restarting PostgreSQL (a few
# seconds) is not hammered, short enough that service resumes promptly. Clients add their own back-off.
DATABASE_RETRY_AFTER_S = 2


def database_unavailable(exc: Exception) -> bool:
    """An error that says the database cannot be reached or the connection died (PostgreSQL restarting, network,
    pool exhausted, SQLite busy beyond its timeout), as opposed to a bug in a query: those stay 500s."""
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(
        exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError | sa_exc.TimeoutError
    )


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in loc)


def details_from_validation(errors: list[Any], prefix: tuple[str, ...] = ()) -> list[ErrorDetail]:
    out = []
    for e in errors:
        loc = tuple(prefix) + tuple(e.get("loc", ()))
        msg = e.get("msg", "invalid")
        # Pydantic wraps ValueError messages raised by our validators: keep the readable part.
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        out.append(ErrorDetail(field=_field(loc) or None, message=msg, type=e.get("type")))
    return out


def validation_message(detail: list[ErrorDetail]) -> str:
    parts = [f"{d.field}: {d.message}" if d.field else d.message for d in detail[:5]]
    more = f" (and {len(detail) - 5} more)" if len(detail) > 5 else ""
    return "Invalid request: " + "; ".join(parts) + more


def invalid(field: str, message: str, kind: str = "value_error") -> Unprocessable:
    """A 422 whose detail names the field, like the request-validation errors do."""
    detail = [ErrorDetail(field=field, message=message, type=kind)]
    return Unprocessable(validation_message(detail), detail)


def envelope(
    status: int,
    code: str,
    message: str,
    detail: list[ErrorDetail] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorEnvelope(error=code, message=message, detail=detail or [])
    return ORJSONResponse(status_code=status, content=body.model_dump(mode="json"), headers=headers)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RidgelineError)
    async def _ridgeline(_: Request, exc: RidgelineError) -> JSONResponse:
        return envelope(exc.status_code, exc.code, exc.message, exc.detail, exc.headers)

    @app.exception_handler(InvalidField)
    async def _invalid_field(_: Request, exc: InvalidField) -> JSONResponse:
        # What the adapters (schemas ↔ core) cannot map, or a number JSON cannot carry: a 422 naming the field.
        error = invalid(exc.field, exc.message, exc.kind)
        return envelope(error.status_code, error.code, error.message, error.detail)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        detail = details_from_validation(list(exc.errors()))
        return envelope(422, "validation_error", validation_message(detail), detail)

    @app.exception_handler(ValidationError)
    async def _model_validation(_: Request, exc: ValidationError) -> JSONResponse:
        detail = details_from_validation(list(exc.errors()), ("body",))
        return envelope(422, "validation_error", validation_message(detail), detail)

    @app.exception_handler(RefusedInput)
    async def _refused(_: Request, exc: RefusedInput) -> JSONResponse:
        # Before validation (service.encoding): a body that is not JSON (415), a NUL character, nesting too deep.
        detail = [ErrorDetail(field=exc.field, message=exc.message, type=exc.kind)]
        code = _HTTP_CODES[exc.status_code]
        return envelope(exc.status_code, code, validation_message(detail), detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        return envelope(exc.status_code, code, str(exc.detail))

    @app.exception_handler(sa_exc.SQLAlchemyError)
    async def _database(request: Request, exc: sa_exc.SQLAlchemyError) -> JSONResponse:
        # Handled here (not in the catch-all below, which Starlette runs outside every middleware and re-raises), so
        # the metrics middleware counts a 503 rather than a 500.
        if not database_unavailable(exc):
            raise exc
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return envelope(
            503,
            ServiceUnavailable.code,
            f"The database is unreachable ({type(exc).__name__}); retry shortly.",
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return envelope(500, "internal_error", "Internal server error; the failure has been logged.")


# Declared on every route so the envelope shows in the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorEnvelope, "description": "Bad request"},
    404: {"model": ErrorEnvelope, "description": "Not found"},
    413: {
        "model": ErrorEnvelope,
        "description": "The request body is over the limit (`RIDGELINE_MAX_BODY_BYTES`, default 32 MiB)",
    },
    422: {"model": ErrorEnvelope, "description": "Validation error; `detail[].field` names the offending field"},
    500: {"model": ErrorEnvelope, "description": "Internal error"},
    503: {
        "model": ErrorEnvelope,
        "description": "The database is unreachable (`Retry-After` says when to retry), or the request ran past "
        "its time limit (`error`: `timeout`) and nothing it would have written was stored",
        "headers": {"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}},
    },
}
