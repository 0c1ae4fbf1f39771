"""Heavy endpoints (serving estimates, plans and the plan's chart): their work ends with their answer, and no one
client can starve the others.

A heavy request goes through, in order:
1. Its client: the API key it sends (checked: an unknown or revoked key is a 401), else its address (the peer's, or
   `Settings.client_address_header`'s when a trusted proxy sets one).
2. At most `Settings.heavy_per_client` of one client's heavy requests in flight in this process: beyond, 429.
3. The client's rate, `Settings.heavy_requests_per_window` per window, counted in the database so every replica
   shares it (`service.ratelimit.charge_client`; its own short transaction): beyond, 429 with `Retry-After`.
4. A compute slot: at most `Settings.heavy_slots` heavy requests compute at once in this process; the rest wait
   in order up to `Settings.heavy_queue_s`, then 503 with `Retry-After`.
5. The read: what the compute needs (profiles, models, a trace), in one session closed before the compute starts,
   so the compute holds no database connection.
6. The compute, on a thread of the process's heavy pool, at a lower priority (nice 5 where the system has per-thread
   priorities) and yielding the processor each time it asks whether to stop: `/healthz` and the cheap endpoints keep
   their threads and the event loop. It asks `should_stop` (`roofline.StopCheck`) every 64 events of a simulation
   and before each plan candidate; at the request's deadline (`service.timeouts`) the answer is true and the work
   ends (`roofline.Stopped`), as the client gets its 503. A plan stops a little earlier, leaving itself time to
   answer what it has (`partial`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

import roofline
from service import ratelimit
from service.auth import ViewerDep
from service.errors import ERROR_RESPONSES, ServiceUnavailable, TooManyRequests
from service.settings import Settings
from service.timeouts import Deadline, RequestTimedOut, current_deadline

log = logging.getLogger("ridgeline")

I = TypeVar("I")  # noqa: E741 - what the read hands the compute
T = TypeVar("T")

NICE = 5  # the compute threads' priority below the process's (Linux: per thread)
# A plan stops this share of its request's time limit before the limit (at least 0.25 s, at most 2 s), to rank and
# answer what it has: ranking and encoding a plan of 1 280 candidates takes ~0.1 s.
PARTIAL_MARGIN = 0.2
MAX_CLIENT_CHARS = 72  # a header's address is cut to this, so the client fits its column (80)


_RETRY = {"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}}
# Declared on every heavy route, for the OpenAPI document.
HEAVY_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: ERROR_RESPONSES[400] | {"description": "An unknown or revoked API key (a heavy request's client is its key)"},
    429: ERROR_RESPONSES[400]
    | {
        "description": "This client has its most heavy requests in flight, or has sent its most heavy requests per "
        "window (`RIDGELINE_HEAVY_PER_CLIENT`, `RIDGELINE_HEAVY_REQUESTS_PER_WINDOW`)",
        "headers": _RETRY,
    },
    503: ERROR_RESPONSES[503]
    | {
        "description": "Every heavy slot of the server was busy for `RIDGELINE_HEAVY_QUEUE_S` (`error`: "
        "`unavailable`), the request ran past its time limit and was stopped (`error`: `timeout`), or the database is "
        "unreachable; `Retry-After` says when to retry",
    },
}
# The header a partial answer carries: a plan that stopped at its time limit with candidates unfinished.
PARTIAL_HEADER = "Ridgeline-Partial"


def partial_header(unfinished: int, candidates: int) -> dict[str, str]:
    """`Ridgeline-Partial: unfinished=N; candidates=M`."""
    return {PARTIAL_HEADER: f"unfinished={unfinished}; candidates={candidates}"}


@dataclass(frozen=True)
class HeavyLimits:
    slots: int
    queue_s: float
    per_client: int
    requests: int
    window_s: int
    address_header: str | None = None
    clock: Callable[[], float] = field(default=time.time, compare=False)  # Unix time, for the rate windows

    @classmethod
    def from_settings(cls, settings: Settings) -> HeavyLimits:
        return cls(
            slots=settings.heavy_slots,
            queue_s=settings.heavy_queue_s,
            per_client=settings.heavy_per_client,
            requests=settings.heavy_requests_per_window,
            window_s=settings.rate_limit_window_s,
            address_header=settings.client_address_header,
        )


class _Slots:
    """At most `size` holders at once; the others wait in arrival order, each up to its own timeout. Used on the
    event loop only (no lock), and bound to no loop (a test client may run the app on several in turn)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.held = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def acquire(self, timeout_s: float) -> bool:
        if self.held < self.size and not self.waiting:
            self.held += 1
            return True
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(ticket)
        try:
            await asyncio.wait_for(asyncio.shield(ticket), timeout_s)
            return True  # a holder handed its slot over
        except TimeoutError:
            return ticket.done()  # handed over just as the wait ran out: take it
        except asyncio.CancelledError:
            if ticket.done():
                self.release()
            raise
        finally:
            if not ticket.done():
                ticket.cancel()
                self.waiting.remove(ticket)

    def release(self) -> None:
        while self.waiting:
            ticket = self.waiting.popleft()
            if not ticket.done():
                ticket.set_result(None)  # the slot passes to the first in line; `held` is unchanged
                return
        self.held -= 1


def _lower_priority() -> None:
    """The heavy pool's thread initializer: on Linux, nice(2) sets the calling thread's priority alone."""
    with contextlib.suppress(AttributeError, OSError):  # no per-thread priority here: the yields still apply
        os.nice(NICE)


class HeavyGate:
    """One per process (`app.state.heavy`): the compute slots, the clients' requests in flight, the heavy pool."""

    def __init__(self, limits: HeavyLimits) -> None:
        self.limits = limits
        self.slots = _Slots(limits.slots)
        self.in_flight: dict[str, int] = {}
        self._pool: ThreadPoolExecutor | None = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The heavy threads, made on first use (again after `close`: a test client may start the app twice)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.limits.slots, "ridgeline-heavy", initializer=_lower_priority)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _client_address(request: Request, header: str | None) -> str:
    if header:
        value = request.headers.get(header)
        if value:
            return value.split(",")[-1].strip()[:MAX_CLIENT_CHARS]  # the last entry: what the trusted proxy saw
    return request.client.host if request.client else "unknown"


def stopper(deadline: Deadline | None, margin: bool) -> roofline.StopCheck:
    """`should_stop` for a compute: true once the request has timed out or its deadline (less the plan's margin) has
    passed. Each call first yields the processor (and the GIL), so the event loop and the cheap endpoints' threads
    run between a heavy compute's chunks."""
    if deadline is None:
        at = math.inf
    else:
        at = deadline.at - (min(2.0, max(0.25, PARTIAL_MARGIN * deadline.seconds)) if margin else 0.0)

    def should_stop() -> bool:
        if hasattr(os, "sched_yield"):
            os.sched_yield()
        return (deadline is not None and deadline.expired) or time.monotonic() >= at

    return should_stop


@dataclass
class Heavy:
    """One heavy request: who sent it, its deadline, and the process's gate."""

    gate: HeavyGate
    client: str
    deadline: Deadline | None
    sessions: sessionmaker[Session]

    async def run(
        self, read: Callable[[Session], I], compute: Callable[[I, roofline.StopCheck], T], *, partial: bool = False
    ) -> T:
        """`read(session)` then `compute(inputs, should_stop)`, within the limits above. `partial`: the compute
        answers what it has when it stops (a plan), so it stops a little before the deadline."""
        gate, limits = self.gate, self.gate.limits
        wait_s = max(1, math.ceil(limits.queue_s))
        if gate.in_flight.get(self.client, 0) >= limits.per_client:
            raise TooManyRequests(
                f"This client already has {limits.per_client} heavy requests (serving estimates, plans) in flight; "
                "wait for one to end.",
                headers={"Retry-After": str(wait_s)},
            )
        gate.in_flight[self.client] = gate.in_flight.get(self.client, 0) + 1
        try:
            charged = await run_in_threadpool(self._charge) if limits.requests else None
            if not await gate.slots.acquire(limits.queue_s):
                if charged is not None:  # turned away before any work: not counted against the client
                    await run_in_threadpool(self._refund, charged)
                raise ServiceUnavailable(
                    f"Every heavy slot of this server ({limits.slots}) is busy and none came free within "
                    f"{limits.queue_s:g} s; retry later.",
                    headers={"Retry-After": str(wait_s)},
                )
            try:
                inputs = await run_in_threadpool(self._read, read)
                should_stop = stopper(self.deadline, partial)
                loop = asyncio.get_running_loop()
                try:
                    return await loop.run_in_executor(gate.pool, compute, inputs, should_stop)
                except roofline.Stopped:
                    seconds = self.deadline.seconds if self.deadline is not None else 0.0
                    message = f"The request ran past its {seconds:g} s time limit and was stopped."
                    raise RequestTimedOut(message) from None
            finally:
                gate.slots.release()
        finally:
            left = gate.in_flight[self.client] - 1
            if left:
                gate.in_flight[self.client] = left
            else:
                del gate.in_flight[self.client]

    def _charge(self) -> int | None:
        limits = self.gate.limits
        with self.sessions() as session:
            return ratelimit.charge_client(session, self.client, limits.requests, limits.window_s, limits.clock)

    def _refund(self, window_start: int) -> None:
        with self.sessions() as session:
            ratelimit.refund_client(session, self.client, window_start)

    def _read(self, read: Callable[[Session], I]) -> I:
        with self.sessions() as session:  # closed (rolled back) before the compute: it only read
            return read(session)


async def heavy(request: Request, principal: ViewerDep) -> Heavy:
    """The dependency of the heavy endpoints: the client is the key's (checked by `viewer`: 401 if unknown), else
    the address's."""
    gate: HeavyGate = request.app.state.heavy
    if principal is not None:
        client = f"key:{principal.key_id}"
    else:
        client = f"addr:{_client_address(request, gate.limits.address_header)}"
    return Heavy(gate, client, current_deadline(request.scope), request.app.state.sessionmaker)


HeavyDep = Annotated[Heavy, Depends(heavy)]
