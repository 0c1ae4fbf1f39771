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

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adapters import non_finite

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


class OrjsonRequest(Request):
    """A request whose JSON body orjson parses (several times faster than the json module on large uploads, and a
    few µs less on every estimate). A body orjson refuses is parsed again by the json module, which accepts a little
    more (NaN and Infinity literals, integers beyond 64 bits) and otherwise raises the usual JSONDecodeError: what a
    body means, and the error a malformed one gets, are exactly as before."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = orjson.loads(body)
            except orjson.JSONDecodeError:
                self._json = json.loads(body)
        return self._json


class OrjsonRoute(APIRoute):
    """Routes whose handlers get an `OrjsonRequest` (FastAPI, "Custom Request and APIRoute class"); every router
    of the service uses it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(OrjsonRequest(request.scope, request.receive, request._send))

        return route
