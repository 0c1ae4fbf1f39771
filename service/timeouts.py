"""Request time limits: no request holds the service longer than `Settings.request_timeout_s` (uploads:
`Settings.upload_timeout_s`) before it is answered, and a request answered "timed out" stores nothing.

A pure ASGI middleware sets a timer per request. If the response has not started when it fires, the client gets a
503 envelope (`error: timeout`) and whatever the application sends later is dropped.

Sync endpoints run in Starlette's thread pool, and a thread cannot be cancelled: the endpoint's thread goes on until
it returns. What it must not do is commit after the client was told nothing was stored. The request's `Deadline`
settles that race under a lock: the unit of work (`service.db.unit_of_work`) asks `deadline.begin_commit()` before
it commits and rolls back if the request has timed out; the middleware calls `deadline.expire()`, which fails if a
commit has already begun, and then waits for that commit's own response instead of sending a 503. Either the
client hears 503 and nothing was stored, or the write committed and the client hears its real answer. The thread's
remaining compute is bounded by the input limits (results per upload, points per sweep), not by this module.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.common import ErrorEnvelope
from service.errors import RidgelineError

log = logging.getLogger("ridgeline")

TIMEOUT_CODE = "timeout"


class RequestTimedOut(RidgelineError):
    """Raised in the endpoint's thread when it tries to commit after its request's deadline."""

    status_code = 503
    code = TIMEOUT_CODE


class Deadline:
    """A request's deadline and the commit/timeout race between its endpoint thread and the event loop."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.at = clock() + seconds
        self._lock = threading.Lock()
        self._committing = False
        self._expired = False

    @property
    def expired(self) -> bool:
        return self._expired

    def remaining_s(self) -> float:
        return self.at - self._clock()

    def begin_commit(self) -> None:
        """Called by the unit of work before it commits: raises if the request was answered with a timeout (or its
        time is up, so that a commit cannot start just before the middleware would answer)."""
        with self._lock:
            if self._expired or self._clock() >= self.at:
                self._expired = True
                raise RequestTimedOut(f"the request ran past its {self.seconds:g} s limit; rolled back")
            self._committing = True

    def expire(self) -> bool:
        """Called by the middleware at the deadline: True if the request is now timed out (no commit began)."""
        with self._lock:
            if self._committing:
                return False
            self._expired = True
            return True


def current_deadline(scope: Scope) -> Deadline | None:
    state = scope.get("state")
    deadline = state.get("deadline") if isinstance(state, dict) else None
    return deadline if isinstance(deadline, Deadline) else None


def _timeout_body(seconds: float) -> bytes:
    body = ErrorEnvelope(
        error=TIMEOUT_CODE,
        message=f"The request ran past its {seconds:g} s time limit; nothing it would have written was stored.",
        detail=[],
    )
    return json.dumps(body.model_dump(mode="json")).encode()


class _Exchange:
    """One request's send and receive, cut off from the client once it has had its 503."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.started = False
        self.abandoned = False
        self.reply: asyncio.Task[None] | None = None  # the 503, sent from a task of its own

    async def send(self, message: Message) -> None:
        if self.abandoned:
            return  # the client already has its 503
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)

    async def receive(self) -> Message:
        if self.abandoned:
            return {"type": "http.disconnect"}
        return await self._receive()


class TimeoutMiddleware:
    """Answers 503 `timeout` to an HTTP request whose response has not started within its time limit.

    The application runs in the request's own task, as without this middleware; a timer on the event loop (a few
    microseconds per request, where a task per request cost ~60) sends the 503 from a task of its own at the deadline.
    The request's task is left to finish, not cancelled: a sync endpoint's thread cannot be stopped, and cancelling
    would unwind its dependencies (the session) while that thread still uses them. It meets `begin_commit`, rolls
    back, and whatever it answers is dropped.
    """

    def __init__(self, app: ASGIApp, timeout_for: Callable[[Scope], float]) -> None:
        self.app = app
        self.timeout_for = timeout_for
        self._orphans: set[_Exchange] = set()  # answered with a timeout, still running
        self._replies: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = Deadline(self.timeout_for(scope))
        scope.setdefault("state", {})["deadline"] = deadline
        exchange = _Exchange(receive, send)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(deadline.seconds, self._expire, scope, deadline, exchange, send)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception as err:
            if not exchange.abandoned:
                raise
            log.info("a timed-out request ended with %s: %s", type(err).__name__, err)
        finally:
            timer.cancel()
            if exchange.abandoned:
                self._orphans.discard(exchange)
                log.info("timed-out %s %s finished; its answer was dropped", scope.get("method"), scope.get("path"))
                # The 503 must be out before this callable returns: the request's task can end (its thread met
                # `begin_commit` and gave up) before the reply task has run, and a server answers 500 to a callable
                # that returns without a response.
                if exchange.reply is not None:
                    try:
                        await asyncio.shield(exchange.reply)
                    except Exception as err:  # the client is gone: nothing to answer
                        log.info("the timeout answer was not sent: %s", err)

    def _expire(self, scope: Scope, deadline: Deadline, exchange: _Exchange, send: Send) -> None:
        if exchange.started or not deadline.expire():
            return  # answering, or committing: the response is the application's own
        exchange.abandoned = True
        self._orphans.add(exchange)
        log.warning("%s %s timed out after %g s", scope.get("method"), scope.get("path"), deadline.seconds)
        reply = asyncio.get_running_loop().create_task(_send_timeout(send, deadline.seconds))
        exchange.reply = reply
        self._replies.add(reply)
        reply.add_done_callback(self._replies.discard)


async def _send_timeout(send: Send, seconds: float) -> None:
    body = _timeout_body(seconds)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def timeout_for(request_timeout_s: float, upload_timeout_s: float) -> Callable[[Scope], float]:
    """Uploads (POST under /v1/benchmarks and /v1/traces) get the longer limit: 10 000 results, or a trace file of
    100 000 requests, take a while to arrive and store."""

    def pick(scope: Scope) -> float:
        if scope.get("method") == "POST" and str(scope.get("path", "")).startswith(("/v1/benchmarks", "/v1/traces")):
            return upload_timeout_s
        return request_timeout_s

    return pick


def install_timeouts(app: Any, request_timeout_s: float, upload_timeout_s: float) -> None:
    app.add_middleware(TimeoutMiddleware, timeout_for=timeout_for(request_timeout_s, upload_timeout_s))
