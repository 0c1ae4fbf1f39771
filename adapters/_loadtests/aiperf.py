"""aiperf's profile export (`profile_export_aiperf.json`, `aiperf.common.models.export_models.JsonExportData`,
aiperf 0.13.0): one `JsonMetricResult` per metric tag (`time_to_first_token`, `inter_token_latency`,
`request_latency`, `request_throughput`, `output_token_throughput`, `request_count`, `benchmark_duration`,
`input_sequence_length`, `output_sequence_length`), each with its `unit` ("ms", "sec", "requests/sec",
"tokens/sec") and `avg`, `p50`, `p90`, `p99`. aiperf's inter-token latency is per request (request latency − TTFT)
/ (output tokens − 1) (`aiperf/metrics/types/inter_token_latency_metric.py`), the other tools' TPOT. The load is
the profiling phase of `input_config.phases`."""

from __future__ import annotations

from typing import Any

from adapters._errors import InvalidField
from adapters._loadtests._common import (
    UNIT_SECONDS,
    Figures,
    Measured,
    count,
    need,
    num,
    opt,
    opt_num,
    path,
    text,
    whole,
)

NAME = "aiperf"


def _scale(doc: Any, tag: str) -> float:
    unit = str(need(doc, tag, "unit")).split("/")[0].strip().lower()
    if unit not in UNIT_SECONDS:
        raise InvalidField(path(tag, "unit"), f"unit {unit!r} is not a time unit ({', '.join(UNIT_SECONDS)})")
    return UNIT_SECONDS[unit]


def _figures(doc: Any, tag: str) -> Figures:
    scale = _scale(doc, tag)

    def at(key: str) -> float | None:
        value = opt_num(doc, tag, key)
        return None if value is None else value * scale

    return Figures(num(doc, tag, "avg") * scale, at("p50"), at("p90"), at("p99"))


def _load(doc: Any) -> tuple[Any, Any]:
    """The profiling phase's `concurrency` (a "concurrency" phase) or `rate` (a rate phase: "constant", "poisson",
    …), `aiperf/config/phases.py` (`ConcurrencyPhase`, `RatePhaseConfig`). A phase that sets both caps the
    concurrency of an open loop: the rate is the load."""
    phases = opt(doc, "input_config", "phases")
    for phase in phases if isinstance(phases, list) else []:
        if isinstance(phase, dict) and phase.get("kind", "profiling") == "profiling":
            rate = phase.get("rate")
            return (None if rate else phase.get("concurrency")), rate
    return None, None


def read(doc: Any) -> Measured:
    duration = num(doc, "benchmark_duration", "avg", positive=True) * _scale(doc, "benchmark_duration")
    concurrency, rate = _load(doc)
    streamed = opt(doc, "time_to_first_token") is not None
    where = {
        "requests": path("request_count", "avg"),
        "duration_s": path("benchmark_duration", "avg"),
        "requests_per_s": path("request_throughput", "avg"),
        "output_tokens_per_s": path("output_token_throughput", "avg"),
        "ttft_s": path("time_to_first_token", "{p}"),
        "tpot_s": path("inter_token_latency", "{p}"),
        "e2e_s": path("request_latency", "{p}"),
    }
    return Measured(
        tool=NAME,
        requests=count(doc, "request_count", "avg"),
        duration_s=duration,
        requests_per_s=num(doc, "request_throughput", "avg"),
        output_tokens_per_s=num(doc, "output_token_throughput", "avg"),
        ttft_s=_figures(doc, "time_to_first_token") if streamed else None,
        tpot_s=_figures(doc, "inter_token_latency") if opt(doc, "inter_token_latency") is not None else None,
        itl_s=None,
        e2e_s=_figures(doc, "request_latency"),
        mean_prompt_tokens=opt_num(doc, "input_sequence_length", "avg"),
        mean_output_tokens=opt_num(doc, "output_sequence_length", "avg"),
        concurrency=whole(concurrency),
        rate_per_s=float(rate)
        if isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate < 1e6
        else None,
        tool_version=text(opt(doc, "aiperf_version")),
        stats=("avg", "p50", "p90", "p99"),
        where=where,
    )
