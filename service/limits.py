"""The request-body limit: a pure ASGI middleware, so bodies stream through it untouched (nothing is buffered).

A `Content-Length` over the limit is answered 413 at once, before a byte of the body is read. A body without one
(`Transfer-Encoding: chunked`) is counted as it arrives; the chunk that takes it past the limit raises
`PayloadTooLarge` inside the application's `receive()`, which FastAPI passes on while reading the body, and the
error handlers render as the usual envelope. Either way the answer is
`413 {"error": "payload_too_large", "detail": [{"field": "body", ...}]}`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.common import ErrorDetail
from service.errors import envelope


def _size(n: int) -> str:
    return f"{n} bytes ({n / 2**20:g} MiB)" if n >= 2**20 else f"{n} bytes"


class PayloadTooLarge(StarletteHTTPException):
    """A request body over `Settings.max_body_bytes`. An HTTPException, so that FastAPI re-raises it as it is when
    reading the body fails (anything else becomes a 400 there); its own handler renders the envelope."""

    def __init__(self, limit: int, received: int | None = None) -> None:
        got = f"{received} bytes" if received is not None else "more than that"
        message = f"The request body is larger than the limit of {_size(limit)}; got {got}."
        super().__init__(status_code=413, detail=message)
        self.limit = limit

    def response(self) -> JSONResponse:
        field = ErrorDetail(
            field="body",
            message=f"at most {_size(self.limit)} are allowed; split the request "
            "(e.g. uploads of at most 10 000 results)",
            type="payload_too_large",
        )
        response = envelope(413, "payload_too_large", str(self.detail), [field])
        # The unread rest of the body may still be on its way: this connection cannot carry another request.
        response.headers["Connection"] = "close"
        return response


class BodySizeLimit:
    """Answers 413 for a request body over `max_bytes` (`None` turns the check off)."""

    def __init__(self, app: ASGIApp, max_bytes: int | None) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_bytes
        if scope["type"] != "http" or limit is None:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _reject(PayloadTooLarge(limit, declared), scope, receive, send)
            return

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(limit)
            return message

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except PayloadTooLarge as err:
            # Read outside FastAPI's body parsing (a middleware or a raw `request.stream()`): answer here, unless the
            # response has begun, when all that is left is to let the server close the connection.
            if started:
                raise
            await _reject(err, scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server rejects a malformed length before we see it
    return None


async def _reject(err: PayloadTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
    await err.response()(scope, receive, send)


async def _payload_too_large(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, PayloadTooLarge)
    return exc.response()


def install_body_limit(app: FastAPI, max_bytes: int | None) -> None:
    """The middleware, and the handler for the error it raises inside FastAPI's body parsing."""
    app.add_exception_handler(PayloadTooLarge, _payload_too_large)
    app.add_middleware(BodySizeLimit, max_bytes=max_bytes)
