"""SGLang `bench_serving` JSONL (sglang 0.5.23, `sglang/benchmark/serving.py`): each run appends one JSON line
(`result`): `duration` s, `completed`, `request_throughput`, `output_throughput`, `total_input_tokens`,
`total_output_tokens`, and per metric (`ttft`, `tpot`, `itl`, `e2e_latency`) `mean_X_ms`, `median_X_ms`,
`p90_X_ms`, `p95_X_ms`, `p99_X_ms`; the load in `max_concurrency` and `request_rate` (a number, "inf" or "trace").
The file is the text (`result` a string); one line is read (`select`: the last, the newest run, by default)."""

from __future__ import annotations

import json
from typing import Any

from adapters._errors import InvalidField
from adapters._loadtests._common import ROOT, Measured, count, num, opt, path, rate_or_concurrency, whole
from adapters._loadtests.vllm import figures

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
    completed = count(doc, "completed")
    rate = rate_or_concurrency(opt(doc, "request_rate"), path("request_rate"))
    concurrency = whole(opt(doc, "max_concurrency"))
    if rate is None and concurrency is None:
        concurrency = completed
    ttft = figures(doc, "ttft")
    e2e = figures(doc, "e2e_latency")
    assert e2e is not None
    return Measured(
        tool=NAME,
        requests=completed,
        duration_s=num(doc, "duration", positive=True),
        requests_per_s=num(doc, "request_throughput"),
        output_tokens_per_s=num(doc, "output_throughput"),
        ttft_s=ttft,
        tpot_s=figures(doc, "tpot"),
        itl_s=figures(doc, "itl"),
        e2e_s=e2e,
        mean_prompt_tokens=num(doc, "total_input_tokens") / completed,
        mean_output_tokens=num(doc, "total_output_tokens") / completed,
        concurrency=concurrency if rate is None else None,
        rate_per_s=rate,
        stats=("mean", "median", "p90", "p99"),
        where={
            "requests": path("completed"),
            "duration_s": path("duration"),
            "requests_per_s": path("request_throughput"),
            "output_tokens_per_s": path("output_throughput"),
            "ttft_s": path("{p}_ttft_ms"),
            "tpot_s": path("{p}_tpot_ms"),
            "e2e_s": path("{p}_e2e_latency_ms"),
        },
    )
