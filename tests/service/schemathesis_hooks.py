"""Loaded by the schemathesis CLI (`SCHEMATHESIS_HOOKS`, tests/service/test_schemathesis.py): trace files are sent
as JSON Lines (`POST /v1/traces`), a media type schemathesis has no serializer for; its bodies are text, sent as
text/plain's serializer sends them."""

from __future__ import annotations

import schemathesis

schemathesis.serializer.alias("application/x-ndjson", "text/plain")
