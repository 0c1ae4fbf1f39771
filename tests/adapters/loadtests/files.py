"""Result files in each tool's format, with the field names of its own source (the module docstrings of
`adapters/_loadtests/` cite file and function): the same load test, 100 requests of 512 prompt and 128 output tokens
over 20 s at concurrency 8, written as each tool writes it. aiperf's and GuideLLM's own files are in
`tests/emulate/` (written by the tools themselves against `ridgeline emulate`)."""

from __future__ import annotations

import json
from typing import Any

# The figures every file below carries, in seconds: mean, p50, p90, p99.
TTFT = (0.040, 0.038, 0.060, 0.090)
TPOT = (0.009, 0.009, 0.010, 0.011)
E2E = (1.200, 1.190, 1.300, 1.400)


def _ms(fig: tuple[float, ...]) -> list[float]:
    return [round(v * 1e3, 6) for v in fig]


def vllm() -> dict[str, Any]:
    """vllm/benchmarks/serve.py: `result` (duration … output_throughput) and process_one_metric's mean/median/pNN."""
    doc: dict[str, Any] = {
        "date": "20261202-101500", "backend": "openai-chat", "model_id": "meta-llama/Meta-Llama-3-8B",
        "num_prompts": 100, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 8,
        "duration": 20.0, "completed": 100, "failed": 0, "total_input_tokens": 51200, "total_output_tokens": 12800,
        "request_throughput": 5.0, "request_goodput": None, "output_throughput": 640.0,
        "total_token_throughput": 3200.0, "max_output_tokens_per_s": 700.0, "max_concurrent_requests": 8,
    }  # fmt: skip
    for metric, fig in (("ttft", TTFT), ("tpot", TPOT), ("itl", TPOT), ("e2el", E2E)):
        mean, p50, p90, p99 = _ms(fig)
        doc |= {f"mean_{metric}_ms": mean, f"median_{metric}_ms": p50, f"std_{metric}_ms": 1.0,
                f"p90_{metric}_ms": p90, f"p99_{metric}_ms": p99}  # fmt: skip
    return doc


def sglang() -> str:
    """sglang/benchmark/serving.py: one `json.dumps(result)` line per run, appended; two runs here, the second at
    concurrency 8 (the newest, read by default)."""
    lines = []
    for conc, scale in ((4, 0.5), (8, 1.0)):
        doc: dict[str, Any] = {
            "tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": "inf",
            "max_concurrency": conc, "random_input_len": 512, "random_output_len": 128, "duration": 20.0 / scale,
            "completed": 100, "total_input_tokens": 51200, "total_output_tokens": 12800,
            "request_throughput": 5.0 * scale, "input_throughput": 2560.0 * scale, "output_throughput": 640.0 * scale,
            "total_throughput": 3200.0 * scale, "concurrency": conc, "accept_length": None,
        }  # fmt: skip
        for metric, fig in (("ttft", TTFT), ("tpot", TPOT), ("itl", TPOT), ("e2e_latency", E2E)):
            mean, p50, p90, p99 = _ms(fig)
            doc |= {f"mean_{metric}_ms": mean, f"median_{metric}_ms": p50, f"std_{metric}_ms": 1.0,
                    f"p90_{metric}_ms": p90, f"p95_{metric}_ms": p90, f"p99_{metric}_ms": p99}  # fmt: skip
        lines.append(json.dumps(doc))
    return "\n".join(lines) + "\n"


def inference_perf() -> dict[str, Any]:
    """inference_perf/reportgen/base.py summarize_requests → ResponsesSummary; `summarize` writes mean, min, max and
    `median` / `p{p:g}` for each configured percentile; latencies in seconds."""

    def summ(fig: tuple[float, ...]) -> dict[str, float]:
        mean, p50, p90, p99 = fig
        return {"mean": mean, "min": p50 / 2, "max": p99 * 1.1, "median": p50, "p90": p90, "p99": p99}

    return {
        "retries": None,
        "benchmark_time_seconds": 20.0,
        "load_summary": {
            "count": 100,
            "schedule_delay": None,
            "send_duration": 19.0,
            "requested_rate": 5.0,
            "achieved_rate": 5.2,
            "concurrency": 8,
        },
        "successes": {
            "count": 100,
            "latency": {
                "request_latency": summ(E2E),
                "normalized_time_per_output_token": summ(TPOT),
                "time_per_output_token": summ(TPOT),
                "time_to_first_token": summ(TTFT),
                "inter_token_latency": summ(TPOT),
            },
            "throughput": {
                "input_tokens_per_sec": 2560.0,
                "output_tokens_per_sec": 640.0,
                "total_tokens_per_sec": 3200.0,
                "requests_per_sec": 5.0,
            },
            "prompt_len": {"mean": 512.0},
            "output_len": {"mean": 128.0},
        },
        "failures": {"count": 0, "request_latency": None},
    }


def trtllm_bench() -> dict[str, Any]:
    """tensorrt_llm/bench/dataclasses/reporting.py get_statistics_dict (0.20): request_info, performance,
    streaming_metrics, percentiles as `average`, `p50`, `p90`, `p95`, `p99`, `minimum`, `maximum` in ms."""

    def pct(fig: tuple[float, ...]) -> dict[str, float]:
        mean, p50, p90, p99 = _ms(fig)
        return {"minimum": p50 / 2, "maximum": p99 * 1.1, "average": mean, "p50": p50, "p90": p90, "p95": p90,
                "p99": p99}  # fmt: skip

    return {
        "engine": {"model": "meta-llama/Meta-Llama-3-8B", "backend": "pytorch", "version": "0.20.0"},
        "world_info": {"tp_size": 1, "pp_size": 1, "ep_size": 1, "max_batch_size": 8, "max_num_tokens": 8192},
        "request_info": {
            "num_requests": 100,
            "avg_num_concurrent_requests": 7.9,
            "avg_input_length": 512.0,
            "avg_output_length": 128.0,
            "concurrency": 8,
        },
        "performance": {
            "total_latency_ms": 20000.0,
            "avg_request_latency_ms": 1200.0,
            "request_throughput_req_s": 5.0,
            "system_output_throughput_tok_s": 640.0,
            "system_total_throughput_tok_s": 3200.0,
            "request_latency_percentiles_ms": pct(E2E),
        },
        "streaming_metrics": {
            "token_output_speed_tok_s": 111.1,
            "avg_ttft_ms": 40.0,
            "avg_tpot_ms": 9.0,
            "ttft_percentiles_ms": pct(TTFT),
            "tpot_percentiles_ms": pct(TPOT),
        },
    }
