"""A stand-in for `POST /v1/benchmarks` behind httpx.MockTransport: idempotent as the real service is."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx


class FakeService:
    """Stores each upload once per Idempotency-Key; the same key and body replays, another body is a 409.

    `down` makes every request fail to connect; `lose_responses` stores a batch and then drops the connection, as a
    server killed between its commit and its answer; `refuse_rows` refuses (422, naming the result) the results
    whose op has these `rows`.
    """

    def __init__(self) -> None:
        self.down = False
        self.lose_responses = 0
        self.status_override: list[int] = []
        self.refuse_rows: set[int] = set()
        self.stored: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.requests: list[httpx.Request] = []

    @property
    def results(self) -> list[dict[str, Any]]:
        return [result for _, results in self.stored.values() for result in results]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.status_override:
            status = self.status_override.pop(0)
            return httpx.Response(status, json={"error": "x", "message": f"status {status}", "detail": []})
        if request.method == "GET" and request.url.path == "/v1/hardware/resolve":
            device = request.url.params["device"]
            if device.lower() in ("cpu", "amd epyc"):
                return httpx.Response(200, json={"device": device, "slug": "cpu-generic", "name": "CPU", "rule": "r"})
            return httpx.Response(404, json={"error": "not_found", "message": "no profile", "detail": []})
        body = request.content
        payload = json.loads(body)
        key = request.headers["idempotency-key"]
        digest = hashlib.sha256(body).hexdigest()
        results = payload.get("results", [])
        bad = [i for i, r in enumerate(results) if isinstance(r, dict) and r["op"].get("rows") in self.refuse_rows]
        if key in self.stored:
            if self.stored[key][0] != digest:
                return httpx.Response(409, json={"error": "conflict", "message": "key reused", "detail": []})
            replayed = {"idempotent-replayed": "true"}
            return httpx.Response(201, json={"results": len(payload["results"])}, headers=replayed)
        if bad:
            detail = [{"field": f"body.results.{i}.op.dtype", "message": "no peak", "type": "value_error"} for i in bad]
            return httpx.Response(422, json={"error": "validation_error", "message": "bad dtype", "detail": detail})
        self.stored[key] = (digest, payload["results"])
        if self.lose_responses:
            self.lose_responses -= 1
            raise httpx.ReadError("server closed the connection", request=request)
        return httpx.Response(201, json={"results": len(payload["results"])})
