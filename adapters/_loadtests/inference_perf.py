"""inference-perf's per-stage report JSON (inference-perf 0.7.0, `inference_perf/reportgen/base.py`
`summarize_requests` → `ResponsesSummary`): `benchmark_time_seconds`, `load_summary` (`count`, `requested_rate`,
`concurrency`), `successes.count`, `successes.latency.{time_to_first_token, time_per_output_token,
inter_token_latency, request_latency}` each `summarize()`d in seconds (`mean`, `median`, `p90`, `p99`),
`successes.throughput.{requests_per_sec, output_tokens_per_sec}`, `successes.prompt_len` / `output_len` means."""

from __future__ import annotations

from typing import Any

from adapters._loadtests._common import Figures, Measured, count, num, opt, opt_num, path, whole

NAME = "inference_perf"


def _figures(doc: Any, metric: str, *, required: bool = True) -> Figures | None:
    base = ("successes", "latency", metric)
    if not required and opt(doc, *base) is None:
        return None
    return Figures(num(doc, *base, "mean"), opt_num(doc, *base, "median"), opt_num(doc, *base, "p90"),
                   opt_num(doc, *base, "p99"))  # fmt: skip


def read(doc: Any) -> Measured:
    rate = opt_num(doc, "load_summary", "requested_rate")
    concurrency = opt(doc, "load_summary", "concurrency")
    mean_out = opt_num(doc, "successes", "output_len", "mean")
    mean_in = opt_num(doc, "successes", "prompt_len", "mean")
    e2e = _figures(doc, "request_latency")
    assert e2e is not None
    return Measured(
        tool=NAME,
        requests=count(doc, "successes", "count"),
        duration_s=num(doc, "benchmark_time_seconds", positive=True),
        requests_per_s=num(doc, "successes", "throughput", "requests_per_sec"),
        output_tokens_per_s=num(doc, "successes", "throughput", "output_tokens_per_sec"),
        ttft_s=_figures(doc, "time_to_first_token", required=False),
        tpot_s=_figures(doc, "time_per_output_token", required=False),
        itl_s=_figures(doc, "inter_token_latency", required=False),
        e2e_s=e2e,
        mean_prompt_tokens=mean_in,
        mean_output_tokens=mean_out,
        concurrency=whole(concurrency),
        rate_per_s=rate if rate and whole(concurrency) is None else None,
        stats=("mean", "median", "p90", "p99"),
        where={
            "requests": path("successes", "count"),
            "duration_s": path("benchmark_time_seconds"),
            "requests_per_s": path("successes", "throughput", "requests_per_sec"),
            "output_tokens_per_s": path("successes", "throughput", "output_tokens_per_sec"),
            "ttft_s": path("successes", "latency", "time_to_first_token", "{p}"),
            "tpot_s": path("successes", "latency", "time_per_output_token", "{p}"),
            "e2e_s": path("successes", "latency", "request_latency", "{p}"),
        },
    )
