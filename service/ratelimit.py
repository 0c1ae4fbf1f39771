"""Rate limits, counted in the database so that every replica of the service shares them: uploads per API key
(`charge`), and heavy requests per client (`charge_client`, service.heavy).

Each key has one row per fixed window (`rate_limit_windows`: key, window start, requests, results). An upload adds
to the current row with one atomic `INSERT … ON CONFLICT DO UPDATE … RETURNING` (PostgreSQL and SQLite), so two
replicas charging the same key at once both see the other's count. What is checked is the sliding-window estimate
of Cloudflare's limiter ("How we built rate limiting capable of scaling to millions of domains", Cloudflare blog,
2017): previous window × (1 − fraction of the current window elapsed) + current window. It needs two rows per key,
and has no fixed window's burst of twice the limit across a window edge.

What is charged: an upload that will be stored, charged before its predictions are computed. An idempotent replay
(`Idempotency-Key` already stored) is answered before the charge and costs nothing; a request refused with 429 is
rolled back and costs nothing; a request that loses the race to a concurrent retry with the same key is refunded. An
upload that fails after the charge (a timeout, a crash) has used its quota: the service did the work.

The charge commits the request's transaction at that point, which has only read (the key, the idempotency lookup,
the device): the counter row's lock is held for milliseconds rather than for the whole upload, and the charge needs
no second pooled connection. Windows are aligned to Unix time from each replica's clock (NTP-synchronised hosts:
skew changes counts only near window edges).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from schemas.common import ErrorDetail
from service.errors import TooManyRequests, Unprocessable, validation_message
from service.orm import HeavyRateWindow, RateLimitWindow
from service.settings import Settings

WINDOWS = cast(Table, RateLimitWindow.__table__)
CLIENT_WINDOWS = cast(Table, HeavyRateWindow.__table__)


@dataclass(frozen=True)
class RateLimits:
    """Limits per key and window (0: no limit) and the clock windows are read from (Unix seconds)."""

    requests: int
    results: int
    window_s: int
    clock: Callable[[], float] = field(default=time.time, compare=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> RateLimits:
        return cls(
            requests=settings.upload_requests_per_window,
            results=settings.upload_results_per_window,
            window_s=settings.rate_limit_window_s,
        )

    @property
    def enabled(self) -> bool:
        return self.requests > 0 or self.results > 0


@dataclass(frozen=True)
class Charge:
    """What an upload was charged, and in which window: refunded if the upload turns out to be a replay."""

    api_key_id: int
    window_start: int
    results: int


def _upsert(session: Session, table: Table, keys: dict[str, Any], counts: dict[str, int]) -> tuple[int, ...]:
    """Add `counts` to the row of `keys` (made if missing) in one atomic statement; the row's counts after."""
    dialect = session.get_bind().dialect.name
    insert: Any
    if dialect == "postgresql":
        insert = postgresql.insert(table)
    elif dialect == "sqlite":
        insert = sqlite.insert(table)
    else:  # pragma: no cover - the service runs on these two
        raise RuntimeError(f"unsupported database {dialect}")
    stmt = (
        insert.values(**keys, **counts)
        .on_conflict_do_update(
            index_elements=list(keys),
            set_={name: table.c[name] + insert.excluded[name] for name in counts},
        )
        .returning(*(table.c[name] for name in counts))
    )
    return tuple(int(v) for v in session.execute(stmt).one())


def retry_after_s(limit: int, previous: float, current: float, cost: float, fraction: float, window_s: int) -> float:
    """Seconds until `cost` more fits under `limit`, if nothing else is spent: when previous·(1 − f) + current + cost
    first drops to the limit, in this window (f ≥ `fraction`) or, once this window's count has become the previous
    one, in the next."""
    if previous > 0 and current + cost <= limit:
        needed = 1.0 - (limit - current - cost) / previous
        return max(0.0, needed - fraction) * window_s
    needed_next = 1.0 - (limit - cost) / current if current > 0 else 0.0
    return (1.0 - fraction + max(0.0, needed_next)) * window_s


def charge(session: Session, limits: RateLimits, api_key_id: int, results: int) -> Charge | None:
    """Count one upload of `results` results against the key; raise TooManyRequests (429, Retry-After) when the
    sliding-window estimate would pass a limit. Commits the session (see the module docstring)."""
    if not limits.enabled:
        return None
    if limits.results and results > limits.results:
        detail = [
            ErrorDetail(
                field="body.results",
                message=f"{results} results are more than this service accepts from one key in "
                f"{limits.window_s} s ({limits.results}); send smaller batches",
                type="too_long",
            )
        ]
        raise Unprocessable(validation_message(detail), detail)
    now = limits.clock()
    window_s = limits.window_s
    start = int(now // window_s) * window_s
    fraction = (now - start) / window_s
    requests_now, results_now = _upsert(
        session, WINDOWS, {"api_key_id": api_key_id, "window_start": start}, {"requests": 1, "results": results}
    )
    previous = session.execute(
        select(WINDOWS.c.requests, WINDOWS.c.results).where(
            WINDOWS.c.api_key_id == api_key_id, WINDOWS.c.window_start == start - window_s
        )
    ).one_or_none()
    prev_requests, prev_results = (int(previous.requests), int(previous.results)) if previous else (0, 0)

    waits: list[float] = []
    reasons: list[str] = []
    for name, limit, prev, now_count, cost in (
        ("uploads", limits.requests, prev_requests, requests_now, 1),
        ("results", limits.results, prev_results, results_now, results),
    ):
        if limit and prev * (1.0 - fraction) + now_count > limit + 1e-9:  # not rejected by rounding at the edge
            waits.append(retry_after_s(limit, prev, now_count - cost, cost, fraction, window_s))
            reasons.append(f"{limit} {name}")
    if waits:
        session.rollback()  # this request is not counted
        wait = max(1, math.ceil(max(waits) - 1e-6))  # whole seconds (RFC 9110), not 66 for 65.000000001
        raise TooManyRequests(
            f"Rate limit reached for this API key ({' and '.join(reasons)} per {window_s} s); retry in {wait} s.",
            headers={"Retry-After": str(wait)},
        )
    # Windows older than the previous one are never read again.
    session.execute(
        delete(RateLimitWindow).where(
            RateLimitWindow.api_key_id == api_key_id, RateLimitWindow.window_start < start - window_s
        )
    )
    session.commit()  # the counter row is locked only until here
    return Charge(api_key_id, start, results)


def refund(session: Session, spent: Charge | None) -> None:
    """Give back a charge (in the request's transaction): the upload was a replay after all."""
    if spent is None:
        return
    session.execute(
        update(RateLimitWindow)
        .where(RateLimitWindow.api_key_id == spent.api_key_id, RateLimitWindow.window_start == spent.window_start)
        .values(requests=RateLimitWindow.requests - 1, results=RateLimitWindow.results - spent.results)
    )


def charge_client(session: Session, client: str, limit: int, window_s: int, clock: Callable[[], float]) -> int | None:
    """Count one heavy request of `client` (service.heavy); raise TooManyRequests (429, Retry-After) when the
    sliding-window estimate passes `limit` per `window_s` (0: no limit), as `charge` does for uploads. Commits the
    session: the row is locked for one statement, and a refused request is not counted. Returns the window charged
    (None: no limit), for `refund_client`."""
    if not limit:
        return None
    now = clock()
    start = int(now // window_s) * window_s
    fraction = (now - start) / window_s
    (count,) = _upsert(session, CLIENT_WINDOWS, {"client": client, "window_start": start}, {"requests": 1})
    previous = session.scalar(
        select(CLIENT_WINDOWS.c.requests).where(
            CLIENT_WINDOWS.c.client == client, CLIENT_WINDOWS.c.window_start == start - window_s
        )
    )
    prev = int(previous or 0)
    if prev * (1.0 - fraction) + count > limit + 1e-9:
        session.rollback()
        wait = max(1, math.ceil(retry_after_s(limit, prev, count - 1, 1, fraction, window_s) - 1e-6))
        raise TooManyRequests(
            f"Rate limit reached for this client ({limit} heavy requests per {window_s} s: serving estimates and "
            f"plans); retry in {wait} s.",
            headers={"Retry-After": str(wait)},
        )
    session.execute(
        delete(HeavyRateWindow).where(HeavyRateWindow.client == client, HeavyRateWindow.window_start < start - window_s)
    )
    session.commit()
    return start


def refund_client(session: Session, client: str, window_start: int) -> None:
    """Give back one heavy request's charge (committed): the server turned it away before doing its work."""
    session.execute(
        update(HeavyRateWindow)
        .where(HeavyRateWindow.client == client, HeavyRateWindow.window_start == window_start)
        .values(requests=HeavyRateWindow.requests - 1)
    )
    session.commit()
