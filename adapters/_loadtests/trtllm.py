"""`trtllm-bench throughput --report_json` (TensorRT-LLM `tensorrt_llm/bench/dataclasses/reporting.py`,
`ReportUtility.get_statistics_dict`): `request_info.num_requests`, `request_info.avg_input_length` /
`avg_output_length`, `performance.total_latency_ms` (the run's duration), `performance.request_throughput_req_s`,
`performance.system_output_throughput_tok_s`, `performance.request_latency_percentiles_ms`, and with `--streaming`
`streaming_metrics.ttft_percentiles_ms` / `tpot_percentiles_ms` (each `average`, `p50`, `p90`, `p99`).
trtllm-bench runs its requests at `--concurrency` (`request_info.avg_num_concurrent_requests` is what it reached).

Not read from the source: the registry holds only a 10 kB stub of TensorRT-LLM (its wheels are on NVIDIA's own
index, unreachable here); the names are those of TensorRT-LLM 0.20's `reporting.py` (docs/serving-benchmarks.md)."""

from __future__ import annotations

from typing import Any

from adapters._loadtests._common import Figures, Measured, count, num, opt, opt_num, path, whole

NAME = "trtllm_bench"


def _figures(doc: Any, *keys: str, required: bool = True) -> Figures | None:
    if not required and opt(doc, *keys) is None:
        return None
    ms = 1e-3

    def at(key: str) -> float | None:
        value = opt_num(doc, *keys, key)
        return None if value is None else value * ms

    return Figures(num(doc, *keys, "average") * ms, at("p50"), at("p90"), at("p99"))


def read(doc: Any) -> Measured:
    e2e = _figures(doc, "performance", "request_latency_percentiles_ms")
    assert e2e is not None
    conc = opt(doc, "request_info", "concurrency") or opt(doc, "world_info", "max_concurrency")
    return Measured(
        tool=NAME,
        requests=count(doc, "request_info", "num_requests"),
        duration_s=num(doc, "performance", "total_latency_ms", positive=True) * 1e-3,
        requests_per_s=num(doc, "performance", "request_throughput_req_s"),
        output_tokens_per_s=num(doc, "performance", "system_output_throughput_tok_s"),
        ttft_s=_figures(doc, "streaming_metrics", "ttft_percentiles_ms", required=False),
        tpot_s=_figures(doc, "streaming_metrics", "tpot_percentiles_ms", required=False),
        itl_s=None,
        e2e_s=e2e,
        mean_prompt_tokens=opt_num(doc, "request_info", "avg_input_length"),
        mean_output_tokens=opt_num(doc, "request_info", "avg_output_length"),
        concurrency=whole(conc),
        stats=("average", "p50", "p90", "p99"),
        where={
            "requests": path("request_info", "num_requests"),
            "duration_s": path("performance", "total_latency_ms"),
            "requests_per_s": path("performance", "request_throughput_req_s"),
            "output_tokens_per_s": path("performance", "system_output_throughput_tok_s"),
            "ttft_s": path("streaming_metrics", "ttft_percentiles_ms", "{p}"),
            "tpot_s": path("streaming_metrics", "tpot_percentiles_ms", "{p}"),
            "e2e_s": path("performance", "request_latency_percentiles_ms", "{p}"),
        },
    )
