"""Request time limits: no request holds the service longer than `Settings.request_timeout_s` (uploads:
`Settings.upload_timeout_s`) before it is answered, and a request answered "timed out" stores nothing.

A pure ASGI middleware runs the rest of the application as a separate task and waits for it until the deadline. If
the response has not started by then, the client gets a 503 envelope (`error: timeout`) and whatever the task sends
later is dropped.

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


class TimeoutMiddleware:
    """Answers 503 `timeout` to an HTTP request whose response has not started within its time limit."""

    def __init__(self, app: ASGIApp, timeout_for: Callable[[Scope], float]) -> None:
        self.app = app
        self.timeout_for = timeout_for
        self._orphans: set[asyncio.Task[None]] = set()  # timed-out tasks still finishing (their threads cannot stop)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = Deadline(self.timeout_for(scope))
        scope.setdefault("state", {})["deadline"] = deadline
        started = asyncio.Event()
        abandoned = False

        async def guarded_send(message: Message) -> None:
            if abandoned:
                return  # the client already has its 503
            if message["type"] == "http.response.start":
                started.set()
            await send(message)

        async def guarded_receive() -> Message:
            if abandoned:
                return {"type": "http.disconnect"}
            return await receive()

        async def run() -> None:
            await self.app(scope, guarded_receive, guarded_send)

        task = asyncio.create_task(run())
        waiter = asyncio.create_task(started.wait())
        try:
            await asyncio.wait({task, waiter}, timeout=max(0.0, deadline.remaining_s()), return_when="FIRST_COMPLETED")
            if task.done() or started.is_set() or not deadline.expire():
                # Answered, answering, or committing: the response is the application's own.
                await task
                return
        except asyncio.CancelledError:
            task.cancel()  # the server is stopping this request: as it would without this middleware
            raise
        finally:
            waiter.cancel()
        # Not cancelled: a sync endpoint's thread cannot be stopped, and cancelling the task would unwind its
        # dependencies (the session) while that thread still uses them. It runs on, meets `begin_commit`, rolls back,
        # and whatever it answers is dropped.
        abandoned = True
        self._orphans.add(task)
        task.add_done_callback(self._settled)
        log.warning("%s %s timed out after %g s", scope.get("method"), scope.get("path"), deadline.seconds)
        body = _timeout_body(deadline.seconds)
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._orphans.discard(task)
        if not task.cancelled() and (err := task.exception()) is not None:
            log.info("a timed-out request ended with %s: %s", type(err).__name__, err)


def timeout_for(request_timeout_s: float, upload_timeout_s: float) -> Callable[[Scope], float]:
    """Uploads (POST under /v1/benchmarks) get the longer limit: 10 000 results take a while to arrive and store."""

    def pick(scope: Scope) -> float:
        if scope.get("method") == "POST" and str(scope.get("path", "")).startswith("/v1/benchmarks"):
            return upload_timeout_s
        return request_timeout_s

    return pick


def install_timeouts(app: Any, request_timeout_s: float, upload_timeout_s: float) -> None:
    app.add_middleware(TimeoutMiddleware, timeout_for=timeout_for(request_timeout_s, upload_timeout_s))
