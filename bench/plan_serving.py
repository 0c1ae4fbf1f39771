"""Speed of the capacity planner: `POST /v1/plan` over ~500 candidate deployments (issue 20's bar: < 3 s).

    .venv/bin/python -m bench.plan_serving [--repeat 5] [--warmup 1] [--case mixed-504|aggregated-512]

Starts `ridgeline serve` on SQLite in a temporary directory on a free port, waits for /healthz, and for each case
posts its search `--warmup` times untimed and `--repeat` times timed (one at a time, keep-alive). Prints what the
search saw (candidates, those that cannot run, those pruned, those simulated, those checked under the traffic), the
median and p90 latency (request sent → whole response received) and the server-side time (the mean of the
service's `ridgeline_http_request_duration_seconds` histogram for the route).

Cases (Llama 3 70B, 2 048-token prompts, 256-token answers, 20 requests/s, p90 TTFT ≤ 1 s, TPOT ≤ 50 ms):
- mixed-504: A100, H100, H200, B200 × bf16 or fp8 × aggregated (tensor 2, 4, 8) or disaggregated (prefill and
  decode tensor 2, 4, 8 each, ratios 1:1 and 1:2) × max_num_seqs 32, 64, 128.
- aggregated-512: the same hardware × bf16 or fp8 × tensor 1, 2, 4, 8 × max_num_seqs 8 … 1024 (8) × chunk budget
  2 048 or 8 192.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import httpx

from bench.estimate_sweep import local_server, percentile, time_posts

ROUTE = "/v1/plan"
TARGET_S = 3.0
HARDWARE = ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200"]
DTYPES = [{"weights": "bf16"}, {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}]


def _case(search: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "llama-3-70b", "hardware": HARDWARE,
        "traffic": {"requests_per_s": 20, "prompt_tokens": 2048, "output_tokens": 256},
        "objectives": {"ttft_s": 1.0, "tpot_s": 0.05, "percentile": "p90"},
        "search": {"dtypes": DTYPES, **search},
        "prices": {"a100-sxm-80gb": 1.8, "h100-sxm": 2.9, "h200-sxm": 3.7, "b200": 5.5}, "max_results": 5,
    }  # fmt: skip


CASES = {
    "mixed-504": _case({
        "tensor": [2, 4, 8], "modes": ["aggregated", "disaggregated"],
        "ratios": [{"prefill": 1, "decode": 1}, {"prefill": 1, "decode": 2}], "max_num_seqs": [32, 64, 128],
        "max_num_batched_tokens": [8192],
    }),
    "aggregated-512": _case({
        "tensor": [1, 2, 4, 8], "max_num_seqs": [8, 16, 32, 64, 128, 256, 512, 1024],
        "max_num_batched_tokens": [2048, 8192],
    }),
}  # fmt: skip


def run_case(client: httpx.Client, name: str, repeat: int, warmup: int) -> None:
    payload = CASES[name]
    timed = time_posts(client, ROUTE, payload, repeat, warmup)
    response, ms, server = timed.response, timed.ms, timed.server_ms
    doc = response.json()
    print(f"{name}: POST {ROUTE}, {repeat} runs after {warmup}, {len(response.content) / 1e3:.0f} kB of JSON")
    print(
        f"  {doc['candidates']} candidates: {doc['invalid_count']} cannot run, {doc['pruned']} pruned (TPOT missed "
        f"at a smaller batch), {doc['evaluated']} simulated, {doc['checked_at_traffic']} checked under the traffic"
    )
    best = doc["feasible"][0]["label"] if doc["feasible"] else "none"
    print(f"  best: {best}")
    print(f"  latency: median {statistics.median(ms):.0f} ms, p90 {percentile(ms, 0.9):.0f} ms, min {min(ms):.0f} ms")
    print(f"  server-side (middleware histogram, mean): {server:.0f} ms")
    met = statistics.median(ms) < 1e3 * TARGET_S
    print(f"  target median latency < {TARGET_S:.0f} s: {'met' if met else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plan_serving", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="default: every case")
    args = parser.parse_args(argv)
    with local_server() as (url, _), httpx.Client(base_url=url, timeout=120) as client:
        for name in args.case or list(CASES):
            run_case(client, name, args.repeat, args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
