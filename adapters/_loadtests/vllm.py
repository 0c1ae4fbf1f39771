"""`vllm bench serve --save-result` JSON (vLLM 0.33.0, `vllm/benchmarks/serve.py`: `benchmark()`'s `result` and
`main()`'s `result_json`): `duration` s, `completed`, `request_throughput`, `output_throughput`,
`total_input_tokens`, `total_output_tokens`, and per metric (`ttft`, `tpot`, `itl`, `e2el`) `mean_X_ms`,
`median_X_ms` and `pNN_X_ms` for each of `--metric-percentiles` (default 99). The load: `max_concurrency` (null:
none) and `request_rate` (a number, or "inf": every request at once)."""

from __future__ import annotations

from typing import Any

from adapters._loadtests._common import (
    Figures,
    Measured,
    count,
    num,
    opt,
    opt_num,
    path,
    rate_or_concurrency,
    whole,
)

NAME = "vllm"


def figures(doc: Any, metric: str, *, required: bool = True) -> Figures | None:
    """`mean_X_ms`, `median_X_ms`, `p90_X_ms`, `p99_X_ms` as seconds (vLLM and SGLang write the same names)."""
    if not required and opt(doc, f"mean_{metric}_ms") is None:
        return None

    def at(key: str) -> float | None:
        value = opt_num(doc, key)
        return None if value is None else value / 1e3

    return Figures(num(doc, f"mean_{metric}_ms") / 1e3, at(f"median_{metric}_ms"), at(f"p90_{metric}_ms"),
                   at(f"p99_{metric}_ms"))  # fmt: skip


def read(doc: Any) -> Measured:
    return read_bench_serving(doc, NAME, "e2el", required=False)


def read_bench_serving(doc: Any, tool: str, e2e_metric: str, *, required: bool) -> Measured:
    """A `bench_serving`-shaped result (vLLM's and SGLang's, which grew from it, write the same keys but for the
    end-to-end metric's name, `e2e_metric`); `required`: whether TTFT, TPOT and ITL must be there (SGLang always
    writes them, vLLM only for the metrics it was asked for)."""
    completed = count(doc, "completed")
    e2e = figures(doc, e2e_metric)
    assert e2e is not None
    rate = rate_or_concurrency(opt(doc, "request_rate"), path("request_rate"))
    concurrency = whole(opt(doc, "max_concurrency"))
    if rate is None and concurrency is None:
        concurrency = completed  # request_rate inf, no limit: every request sent at once
    return Measured(
        tool=tool,
        requests=completed,
        duration_s=num(doc, "duration", positive=True),
        requests_per_s=num(doc, "request_throughput"),
        output_tokens_per_s=num(doc, "output_throughput"),
        ttft_s=figures(doc, "ttft", required=required),
        tpot_s=figures(doc, "tpot", required=required),
        itl_s=figures(doc, "itl", required=required),
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
            "e2e_s": path(f"{{p}}_{e2e_metric}_ms"),
        },
    )
