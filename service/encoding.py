"""JSON responses encoded by orjson, strict about what reaches the encoder.

numpy values never reach it: the service converts at its edge (`ndarray.tolist()`, `float(...)`), and orjson, without
`OPT_SERIALIZE_NUMPY`, raises TypeError on a numpy scalar or array — a leak fails loudly (a 500 and a test failure)
instead of being written in some encoding a client did not expect. Nor do non-finite floats: orjson, like pydantic,
writes NaN and ±∞ as `null`, which would be a silent null where the schema promises a number. A body that contains
`null` is therefore checked for them, and one found is a 422 naming the response field. The input limits
(schemas/limits.py) keep real estimates finite; this is the backstop.

An endpoint that returns a model reaches this class after FastAPI's JSON-mode dump (`default_response_class`): a NaN
in a float field arrives as a float and is caught, but inside a free-form `dict[str, Any]` pydantic turns a numpy
float into a float and NaN into None on the way, so services convert before building their models
(tests/service/test_encoding.py checks their models for numpy).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from adapters import InvalidField, check_json, depth_error, media_type, non_finite, nul_error
from schemas.common import ErrorEnvelope

MEDIA_TYPE = "application/json"


def _non_finite(content: Any, path: str) -> str | None:
    """The path of the first NaN or ±∞ in `content` (plain JSON types), or None."""
    if type(content) is float:
        return None if math.isfinite(content) else path
    if isinstance(content, dict):
        for key, value in content.items():
            if type(value) in (str, int, bool) or value is None:
                continue
            found = _non_finite(value, f"{path}.{key}")
            if found:
                return found
    elif isinstance(content, list | tuple):
        for index, value in enumerate(content):
            found = _non_finite(value, f"{path}.{index}")
            if found:
                return found
    return None


def dumps(content: Any, *, check: bool = True) -> bytes:
    """orjson, no numpy support on purpose (TypeError), and no silent null for NaN or ±∞ (`adapters.InvalidField`,
    answered as a 422 naming the field: `service.errors`).

    `check=False` skips the walk for NaN and ±∞, for a caller that checked its numbers itself (a 10 000-point sweep
    checks its columns with numpy: `adapters.item_dicts`)."""
    body = orjson.dumps(content, option=orjson.OPT_UTC_Z)  # "…Z", as pydantic writes UTC times
    # Only a body with a null can hold a non-finite float: most answers skip the walk.
    if check and b"null" in body:
        where = _non_finite(content, "response")
        if where is not None:
            raise non_finite(where)
    return body


class ORJSONResponse(JSONResponse):
    """The app's default response class (`create_app`) and the error envelope's."""

    media_type = MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return dumps(content)


class RefusedInput(StarletteHTTPException):
    """An input refused before validation, naming its field: a body not sent as JSON (415), a NUL character or
    nesting past the limit (422, `adapters.check_json`). An HTTPException, so that FastAPI passes it on as it is when
    it is raised while the body is parsed (anything else becomes a 400 there); `service.errors` renders the envelope."""

    def __init__(self, status_code: int, error: InvalidField) -> None:
        super().__init__(status_code=status_code, detail=error.message)
        self.field, self.message, self.kind = error.field, error.message, error.kind


class OrjsonRequest(Request):
    """A request whose JSON body orjson parses (several times faster than the json module on large uploads, and a
    few µs less on every estimate). A body orjson refuses is parsed again by the json module, which accepts a little
    more (NaN and Infinity literals, integers beyond 64 bits) and otherwise raises the usual JSONDecodeError: what a
    body means, and the error a malformed one gets, are exactly as before. Whatever the schema, a body may not nest
    past `schemas.limits.MAX_JSON_DEPTH` nor hold a NUL character (`adapters.check_json`): a 422 naming the field."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                doc = orjson.loads(body)  # refuses nesting past 1 024 levels
            except orjson.JSONDecodeError:
                try:
                    doc = json.loads(body)
                except RecursionError:
                    raise RefusedInput(422, depth_error("body")) from None
            try:
                check_json(body, doc)
            except InvalidField as err:
                raise RefusedInput(422, err) from None
            self._json = doc
        return self._json


# The status a route that takes a JSON body answers to any other media type, declared on each such route (the OpenAPI
# document lists every status a route can return).
UNSUPPORTED_MEDIA_TYPE: dict[str, Any] = {
    "model": ErrorEnvelope,
    "description": "The body is not sent as JSON (`Content-Type: application/json`)",
}


def _is_json(kind: str) -> bool:
    """FastAPI's rule for a body it parses as JSON: `application/json` or `application/*+json`."""
    return kind == MEDIA_TYPE or (kind.startswith("application/") and kind.endswith("+json"))


def _media_refused(scope: Scope) -> RefusedInput | None:
    """A body sent under another media type than JSON, or with none (None when there is no body)."""
    content_type: str | None = None
    has_body = False
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value.decode("latin-1")
        elif name == b"content-length":
            has_body = has_body or value.strip() != b"0"
        elif name == b"transfer-encoding":
            has_body = True
    if content_type is None and not has_body:
        return None  # nothing sent: the validation says whether the body was required
    kind = media_type(content_type)
    if _is_json(kind):
        return None
    shown = repr(kind) if kind else "none"
    return RefusedInput(
        415, InvalidField("body", f"Content-Type {shown}: this endpoint takes {MEDIA_TYPE}", "unsupported_media_type")
    )


def _params_refused(scope: Scope) -> RefusedInput | None:
    """A path or query parameter with a NUL character (`%00`): no stored or filtered text may hold one."""
    for name, value in scope.get("path_params", {}).items():
        if isinstance(value, str) and "\x00" in value:
            return RefusedInput(422, nul_error(f"path.{name}"))
    query = scope.get("query_string", b"")
    if b"%00" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                return RefusedInput(422, nul_error(f"query.{name}"))
    return None


class OrjsonRoute(APIRoute):
    """Routes whose handlers get an `OrjsonRequest` (FastAPI, "Custom Request and APIRoute class"); every router
    of the service that takes parameters uses it. Before the handler runs, a parameter with a NUL character is a
    422 naming it, and a route that takes a JSON body answers 415 to a body of another media type (FastAPI would
    validate its bytes as the model: a 422 on `body` that does not say why)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.body_field is not None and 415 not in self.responses:
            self.responses = {**self.responses, 415: UNSUPPORTED_MEDIA_TYPE}
            if 422 in self.response_fields:  # the same envelope's field, for the route's own OpenAPI entry
                self.response_fields = {**self.response_fields, 415: self.response_fields[422]}

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_json = self.body_field is not None

        async def route(request: Request) -> Response:
            scope = request.scope
            refused = _params_refused(scope) or (_media_refused(scope) if takes_json else None)
            if refused is not None:
                raise refused
            return await handler(OrjsonRequest(scope, request.receive, request._send))

        return route
