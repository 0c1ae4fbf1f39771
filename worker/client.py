"""HTTP client for the Ridgeline service: device resolution and batch uploads with retries.

Uploads carry an `Idempotency-Key`; a retried upload sends the same key and the same bytes, so the service stores a
batch once however many times it arrives. Transient failures (connection errors, timeouts, 408/425/429/5xx, a 409
for a concurrent upload with the same key) are retried with exponential back-off and jitter; anything else is final.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

__all__ = [
    "AuthError",
    "Conflict",
    "Rejected",
    "Resolution",
    "RetryPolicy",
    "RidgelineClient",
    "ServiceUnavailable",
    "UploadError",
    "Uploaded",
    "dumps",
]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class UploadError(Exception):
    """An upload (or another request) that did not succeed."""


class ServiceUnavailable(UploadError):
    """The service could not be reached, or kept failing, after every retry: try again later (the spool does)."""


class Rejected(UploadError):
    """The service answered with a final 4xx: sending the same request again will not help."""

    def __init__(self, status_code: int, body: Any, message: str) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.body = body
        self.message = message

    def fields(self) -> list[str]:
        """The dotted paths a validation error names (`body.results.3.op.dtype`)."""
        detail = self.body.get("detail") if isinstance(self.body, dict) else None
        if not isinstance(detail, list):
            return []
        return [str(item["field"]) for item in detail if isinstance(item, dict) and item.get("field")]


class AuthError(Rejected):
    """401 or 403: no key, a revoked key, or a key without the upload scope."""


class Conflict(Rejected):
    """409 that outlasted the retries: the key is taken by a stored upload whose body the service sees as different."""


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; before try n+1 wait a random time in [d/2, d], d = min(max_s, base_s·2ⁿ).

    Exponential back-off with "equal jitter" (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): the
    random half spreads workers that failed together, the fixed half keeps a floor under the wait.

    A `Retry-After` from the service (429 rate limit, 503) is waited out in full when it is longer than the back-off,
    up to `retry_after_max_s`: the service's rate-limit windows are 60 s by default, so its longest answer is about two
    windows (120 s); a retry sent earlier would only be refused again.
    """

    attempts: int = 5
    base_s: float = 0.5
    max_s: float = 30.0
    retry_after_max_s: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base_s < 0 or self.max_s < 0 or self.retry_after_max_s < 0:
            raise ValueError("back-off times must not be negative")

    def delay_s(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number `retry` (0 for the first retry)."""
        ceiling = min(self.max_s, self.base_s * (2.0**retry))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class Uploaded:
    """The service's answer to an upload; `replayed` when it had stored this batch before (same key, same body)."""

    body: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class Resolution:
    """The catalogue profile the service maps a device description to."""

    device: str
    slug: str
    name: str
    rule: str


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:2000]


def _message(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return str(body)[:500]


class RidgelineClient:
    """A small synchronous client; `transport`, `sleep` and `rng` are injectable for tests."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        user_agent: str = "ridgeline-worker",
    ) -> None:
        headers = {"user-agent": user_agent}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RidgelineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, retried on transient failures; returns the first final response (2xx or 4xx)."""
        last_error = "no attempt made"
        for attempt in range(self.retry.attempts):
            wait: float | None = None
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as err:
                last_error = f"{type(err).__name__}: {err}"
            else:
                if response.status_code not in RETRYABLE_STATUS:
                    return response
                last_error = f"HTTP {response.status_code}: {_message(_body(response))}"
                wait = _retry_after_s(response)
                if attempt == self.retry.attempts - 1:
                    if response.status_code == 409:
                        return response  # a lasting conflict is an answer, not an outage
                    break
            if attempt < self.retry.attempts - 1:
                backoff = self.retry.delay_s(attempt, self._rng)
                self._sleep(max(backoff, min(self.retry.retry_after_max_s, wait or 0.0)))
        raise ServiceUnavailable(
            f"{method} {self.base_url}{path} failed after {self.retry.attempts} tries: {last_error}"
        )

    @staticmethod
    def _final(response: httpx.Response) -> Any:
        body = _body(response)
        if response.is_success:
            return body
        if response.status_code in (401, 403):
            raise AuthError(response.status_code, body, _message(body))
        if response.status_code == 409:
            raise Conflict(response.status_code, body, _message(body))
        raise Rejected(response.status_code, body, _message(body))

    def resolve(self, description: str) -> Resolution | None:
        """The profile for a device description; None when the service knows no profile for it (404)."""
        response = self._send("GET", "/v1/hardware/resolve", params={"device": description})
        if response.status_code == 404:
            return None
        body = self._final(response)
        return Resolution(device=body["device"], slug=body["slug"], name=body["name"], rule=body["rule"])

    def upload(self, payload: bytes, idempotency_key: str, path: str = "/v1/benchmarks") -> Uploaded:
        """POST one batch (already serialised, so every retry sends the same bytes) to /v1/benchmarks, or one load
        test to /v1/serving-benchmarks."""
        response = self._send(
            "POST",
            path,
            content=payload,
            headers={"content-type": "application/json", "idempotency-key": idempotency_key},
        )
        body = self._final(response)
        replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
        return Uploaded(body=body if isinstance(body, dict) else {}, replayed=replayed)

    def hardware(self, slug: str) -> dict[str, Any] | None:
        """The hardware profile with this slug; None when there is none (404)."""
        response = self._send("GET", f"/v1/hardware/{slug}")
        if response.status_code == 404:
            return None
        body = self._final(response)
        return body if isinstance(body, dict) else None

    def create_hardware(self, doc: dict[str, Any]) -> Any:
        """POST a hardware profile (`schemas.hardware.HardwareCreate`); a slug already taken is a `Conflict`."""
        headers = {"content-type": "application/json"}
        return self._final(self._send("POST", "/v1/hardware", content=dumps(doc), headers=headers))

    def update_hardware(self, slug: str, patch: dict[str, Any]) -> Any:
        """PATCH a user-added hardware profile with a JSON Merge Patch (RFC 7396)."""
        headers = {"content-type": "application/json"}
        return self._final(self._send("PATCH", f"/v1/hardware/{slug}", content=dumps(patch), headers=headers))

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._final(self._send("GET", path, params=params))


def dumps(payload: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, so equal content gives equal bytes (and equal keys)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
