"""Latency of whole-inference estimates against a real `ridgeline serve` (issue 4's speed bars; the planner's is
`bench.plan_serving`).

    .venv/bin/python -m bench.inference_speed [--repeat 10] [--warmup 2] [--case decode-128k|batch-100]

Starts `ridgeline serve` on SQLite in a temporary directory on a free port, waits for /healthz, and for each case
posts its request `--warmup` times untimed and `--repeat` times timed (one at a time, keep-alive). Prints the median
and p90 latency (request sent → whole response received) and the server-side time: the mean of the service's own
`ridgeline_http_request_duration_seconds` histogram for the route over the timed requests (validation, the model and
rendering, without the socket transfer).

Cases and targets (issue 4), on the 2-core development machine:
- decode-128k: Llama 3.1 405B on 8 H100 SXM (TP8, fp8 weights and KV cache), one request of 1024 prompt tokens and
  131 072 output tokens (131 071 decode steps): server time < 50 ms.
- batch-100: 100 configurations in one POST /v1/estimate/inference/batch, a capacity sweep of Llama 3 70B on H100
  over 5 batch sizes × TP 1, 2, 4, 8 × 5 weight dtypes (2048 prompt and 512 output tokens each): < 1 s.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import httpx

from bench.estimate_sweep import local_server, percentile, time_posts

CASES: dict[str, tuple[str, dict[str, Any], float]] = {
    "decode-128k": (
        "/v1/estimate/inference",
        {
            "model": "llama-3.1-405b",
            "hardware": "h100-sxm",
            "devices": 8,
            "parallelism": {"tensor": 8},
            "workload": {"batch": 1, "prompt_tokens": 1024, "output_tokens": 131072},
            "dtypes": {"weights": "fp8", "activations": "bf16", "kv_cache": "fp8"},
        },
        0.050,
    ),
    "batch-100": (
        "/v1/estimate/inference/batch",
        {
            "sweep": {
                "base": {
                    "model": "llama-3-70b",
                    "hardware": "h100-sxm",
                    "workload": {"batch": 1, "prompt_tokens": 2048, "output_tokens": 512},
                },
                "vary": {
                    "workload.batch": [1, 8, 32, 64, 128],
                    "parallelism.tensor": [1, 2, 4, 8],
                    "dtypes.weights": ["bf16", "fp16", "fp8", "int8", "int4"],
                },
            }
        },
        1.0,
    ),
}


def run_case(client: httpx.Client, name: str, repeat: int, warmup: int) -> None:
    route, payload, target = CASES[name]
    timed = time_posts(client, route, payload, repeat, warmup)
    response, ms, server = timed.response, timed.ms, timed.server_ms
    body = response.json()
    print(f"{name}: POST {route}, {repeat} runs after {warmup}, {len(response.content) / 1e3:.0f} kB of JSON")
    if name == "batch-100":
        print(f"  {len(body['items'])} configurations")
    if name == "decode-128k":
        steps, evaluated = body["decode_step_s"]["steps"], body["assumptions"]["decode_steps_evaluated"]
        print(f"  {steps} decode steps, {evaluated} evaluated")
    print(f"  latency: median {statistics.median(ms):.1f} ms, p90 {percentile(ms, 0.9):.1f} ms, min {min(ms):.1f} ms")
    print(f"  server-side (middleware histogram, mean): {server:.1f} ms")
    measure = server if name == "decode-128k" else statistics.median(ms)
    which = "server time" if name == "decode-128k" else "median latency"
    print(f"  target {which} < {1e3 * target:.0f} ms: {'met' if measure < 1e3 * target else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="default: every case")
    args = parser.parse_args(argv)
    with local_server() as (url, _), httpx.Client(base_url=url, timeout=120) as client:
        for name in args.case or list(CASES):
            run_case(client, name, args.repeat, args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
