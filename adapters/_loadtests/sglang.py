"""SGLang `bench_serving` JSONL (sglang 0.5.23, `sglang/benchmark/serving.py`): each run appends one JSON line
(`result`): `duration` s, `completed`, `request_throughput`, `output_throughput`, `total_input_tokens`,
`total_output_tokens`, and per metric (`ttft`, `tpot`, `itl`, `e2e_latency`) `mean_X_ms`, `median_X_ms`,
`p90_X_ms`, `p95_X_ms`, `p99_X_ms`; the load in `max_concurrency` and `request_rate` (a number, "inf" or "trace").
The file is the text (`result` a string); one line is read (`select`: the last, the newest run, by default)."""

from __future__ import annotations

import json
from typing import Any

from adapters._errors import InvalidField
from adapters._loadtests._common import ROOT, Measured
from adapters._loadtests.vllm import read_bench_serving

NAME = "sglang"


def select(doc: Any, entry: int | None) -> Any:
    """Line `entry` of the file (default the last, the newest run)."""
    if isinstance(doc, dict):
        return doc  # one line, sent as its JSON object
    if not isinstance(doc, str):
        raise InvalidField(ROOT, "SGLang's bench_serving writes JSON lines: send the file's text")
    lines = [line for line in doc.splitlines() if line.strip()]
    if not lines:
        raise InvalidField(ROOT, "the file has no line")
    i = len(lines) - 1 if entry is None else entry
    if not -len(lines) <= i < len(lines):
        raise InvalidField("body.entry", f"the file holds {len(lines)} lines (0 to {len(lines) - 1})")
    i %= len(lines)
    try:
        return json.loads(lines[i])
    except json.JSONDecodeError as err:
        raise InvalidField(ROOT, f"line {i + 1} is not JSON: {err.msg} at column {err.colno}") from None


def read(doc: Any) -> Measured:
    return read_bench_serving(doc, NAME, "e2e_latency", required=True)
