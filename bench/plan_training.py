"""Speed of the training planner: a ~3 000-configuration `POST /v1/plan/training` (issue 22's bar: < 3 s), also on
clusters of 4 096 and 131 072 GPUs (issue 39: the same bar at the scale users plan for).

    .venv/bin/python -m bench.plan_training [--repeat 5] [--warmup 1] [--case NAME ...]

Starts `ridgeline serve` on SQLite in a temporary directory on a free port, waits for /healthz, and for each case
posts its search `--warmup` times untimed and `--repeat` times timed (one at a time, keep-alive). Prints what the
search saw (searched, invalid, pruned for memory, timed), the median and p90 latency (request sent → whole response
received), the server-side time (the mean of the service's `ridgeline_http_request_duration_seconds` histogram for
the route), and the median wall time of the search alone in this process (`adapters.plan_training`: the core's
search on the same model and profile, without HTTP, validation or rendering).

Cases, each the default search axes plus virtual stages 2 and 4 (3 360 configurations per device count before the
duplicates a data group of one makes are dropped):
- llama-8b-64: Llama 3 8B on 64 H100 SXM, 512 sequences of 8192 tokens: most configurations fit and are timed.
- llama-70b-64: Llama 3 70B on the same 64 H100s: most are pruned for memory before any is timed.
- llama-70b-4096, llama-70b-131072: Llama 3 70B on 4 096 and on 131 072 H100s, 16 384 sequences of 8 192 tokens a
  step (134 M tokens; Llama 3 405B's largest batch was 16 M, on 16 384 GPUs: "The Llama 3 Herd of Models", §3.4.1):
  the same search on 32 times the devices. A layout's cost does not grow with its data-parallel degree, so the
  two should take about as long; on 131 072 more layouts leave too large a data degree for the batch (invalid).

After the cases, a table puts them side by side.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx

import adapters
from bench.estimate_sweep import local_server, percentile, time_posts
from hardware_db import load_hardware, load_models
from schemas.training_plan import TrainingPlanRequest

ROUTE = "/v1/plan/training"
TARGET_S = 3.0


def _case(model: str, devices: int = 64, global_batch: int = 512) -> dict[str, Any]:
    return {
        "model": model, "hardware": "h100-sxm", "devices": devices, "sequence": 8192, "global_batch": global_batch,
        "train_tokens": 1e12, "price_per_device_hour": 2.5, "search": {"virtual_stages": [2, 4]}, "max_results": 5,
    }  # fmt: skip


CASES = {
    "llama-8b-64": _case("llama-3-8b"),
    "llama-70b-64": _case("llama-3-70b"),
    "llama-70b-4096": _case("llama-3-70b", 4096, 16_384),
    "llama-70b-131072": _case("llama-3-70b", 131_072, 16_384),
}


def in_process_s(payload: dict[str, Any], repeat: int) -> float:
    """Median seconds of the search alone (`adapters.plan_training`), profile and model from the catalogue."""
    body = TrainingPlanRequest.model_validate(payload)
    spec = next(h for h in load_hardware() if h.slug == body.hardware)
    model = next(m for m in load_models() if m.slug == body.model)
    system = adapters.inference_system(spec, body, None)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        adapters.plan_training(body, model, system)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_case(client: httpx.Client, name: str, repeat: int, warmup: int) -> tuple[str, ...]:
    """Time one case and print it; its row of the side-by-side table."""
    payload = CASES[name]
    timed = time_posts(client, ROUTE, payload, repeat, warmup)
    response, ms, server = timed.response, timed.ms, timed.server_ms
    doc = response.json()
    core = 1e3 * in_process_s(payload, repeat)
    print(f"{name}: POST {ROUTE}, {repeat} runs after {warmup}, {len(response.content) / 1e3:.0f} kB of JSON")
    print(
        f"  {doc['searched']} configurations searched: {doc['invalid']} invalid, {doc['pruned_for_memory']} pruned"
        f" for memory, {doc['evaluated']} timed"
    )
    print(f"  latency: median {statistics.median(ms):.0f} ms, p90 {percentile(ms, 0.9):.0f} ms, min {min(ms):.0f} ms")
    print(f"  server-side (middleware histogram, mean): {server:.0f} ms; the search alone in-process: {core:.0f} ms")
    met = statistics.median(ms) < 1e3 * TARGET_S
    print(f"  target median latency < {TARGET_S:.0f} s: {'met' if met else 'MISSED'}")
    return (
        name, f"{payload['devices']}", f"{doc['searched']}", f"{doc['evaluated']}", f"{statistics.median(ms):.0f}",
        f"{server:.0f}", f"{core:.0f}", "met" if met else "MISSED",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plan_training", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="default: every case")
    args = parser.parse_args(argv)
    with local_server() as (url, _), httpx.Client(base_url=url, timeout=120) as client:
        rows = [run_case(client, name, args.repeat, args.warmup) for name in args.case or list(CASES)]
    head = ("case", "devices", "searched", "timed", "median ms", "server ms", "search ms", f"< {TARGET_S:.0f} s")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    print()
    for row in (head, *rows):
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
