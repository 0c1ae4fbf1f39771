"""Loaded by the schemathesis CLI (`SCHEMATHESIS_HOOKS`, tests/service/test_schemathesis.py): trace files are sent
as JSON Lines (`POST /v1/traces`), a media type schemathesis has no serializer for; its bodies are text, sent as
text/plain's serializer sends them."""

from __future__ import annotations

import schemathesis

schemathesis.serializer.alias("application/x-ndjson", "text/plain")


@schemathesis.check
def not_a_crash(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """`not_a_server_error`, less the two 503s the service answers by design when it is loaded (`service.heavy`,
    `service.timeouts`): `timeout` (the request ran past its limit and its work was stopped) and `unavailable`
    (every heavy slot busy). Any other 5xx, and a 503 of another kind, fails. `status_code_conformance` still holds
    that the 503 is documented for the operation."""
    if response.status_code < 500:
        return
    if response.status_code == 503:
        try:
            error = response.json().get("error")
        except ValueError:
            error = None
        if error in ("timeout", "unavailable"):
            return
    raise AssertionError(f"Server error {response.status_code}: {response.text[:500]}")
