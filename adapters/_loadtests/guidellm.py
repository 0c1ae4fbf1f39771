"""GuideLLM's benchmarks report (`guidellm benchmark … --outputs json`, guidellm 0.8.1,
`guidellm/benchmark/schemas/report.py` `GenerativeBenchmarksReport`): `benchmarks`, a list (one per strategy of a
sweep); each has `duration` s, `config.strategy` (`type_` "synchronous", "concurrent" with `streams`, "constant"
or "poisson" with `rate`, "throughput"), `metrics.request_totals.successful`, and per metric a
`StatusDistributionSummary` whose `successful` is a `DistributionSummary` (`mean`, `percentiles.p50` / `p90` /
`p99`): `time_to_first_token_ms`, `time_per_output_token_ms`, `inter_token_latency_ms`, `request_latency` (s),
`requests_per_second`, `output_tokens_per_second`, `prompt_token_count`, `output_token_count`."""

from __future__ import annotations

from typing import Any

from adapters._errors import InvalidField
from adapters._loadtests._common import Figures, Measured, count, need, num, opt, opt_num, path, text, whole
from adapters._loadtests._common import rate as positive_rate

NAME = "guidellm"


def _figures(doc: Any, base: tuple[str | int, ...], scale: float, *, required: bool = True) -> Figures | None:
    keys = (*base, "successful")
    if not required and opt(doc, *keys) is None:
        return None

    def at(p: str) -> float | None:
        value = opt_num(doc, *keys, "percentiles", p)
        return None if value is None else value * scale

    return Figures(num(doc, *keys, "mean") * scale, at("p50"), at("p90"), at("p99"))


def read(doc: Any, entry: int | None = None) -> Measured:
    benchmarks = need(doc, "benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise InvalidField(path("benchmarks"), "expected a non-empty list of benchmarks")
    i = len(benchmarks) - 1 if entry is None else entry
    if not -len(benchmarks) <= i < len(benchmarks):
        raise InvalidField("body.entry", f"the file holds {len(benchmarks)} benchmarks (0 to {len(benchmarks) - 1})")
    i %= len(benchmarks)
    m: tuple[str | int, ...] = ("benchmarks", i, "metrics")
    strategy = opt(doc, "benchmarks", i, "config", "strategy")
    if not isinstance(strategy, dict):
        strategy = {}
    kind = strategy.get("type_") or strategy.get("type")
    concurrency = 1 if kind == "synchronous" else whole(strategy.get("streams")) if kind == "concurrent" else None
    rate = strategy.get("rate") if kind in ("constant", "poisson") else None
    e2e = _figures(doc, (*m, "request_latency"), 1.0)
    assert e2e is not None
    return Measured(
        tool=NAME,
        requests=count(doc, *m, "request_totals", "successful"),
        duration_s=num(doc, "benchmarks", i, "duration", positive=True),
        requests_per_s=num(doc, *m, "requests_per_second", "successful", "mean"),
        output_tokens_per_s=num(doc, *m, "output_tokens_per_second", "successful", "mean"),
        ttft_s=_figures(doc, (*m, "time_to_first_token_ms"), 1e-3, required=False),
        tpot_s=_figures(doc, (*m, "time_per_output_token_ms"), 1e-3, required=False),
        itl_s=_figures(doc, (*m, "inter_token_latency_ms"), 1e-3, required=False),
        e2e_s=e2e,
        mean_prompt_tokens=opt_num(doc, *m, "prompt_token_count", "successful", "mean"),
        mean_output_tokens=opt_num(doc, *m, "output_token_count", "successful", "mean"),
        concurrency=concurrency,
        rate_per_s=positive_rate(rate),
        tool_version=text(opt(doc, "metadata", "guidellm_version")),
        stats=("mean", "percentiles.p50", "percentiles.p90", "percentiles.p99"),
        where={
            "requests": path(*m, "request_totals", "successful"),
            "duration_s": path("benchmarks", i, "duration"),
            "requests_per_s": path(*m, "requests_per_second"),
            "output_tokens_per_s": path(*m, "output_tokens_per_second"),
            "ttft_s": path(*m, "time_to_first_token_ms", "successful", "{p}"),
            "tpot_s": path(*m, "time_per_output_token_ms", "successful", "{p}"),
            "e2e_s": path(*m, "request_latency", "successful", "{p}"),
        },
    )
