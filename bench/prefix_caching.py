"""Prefix caching (issue 41) on the Mooncake FAST'25 traces (validation/mooncake-traces/), and its speed.

    python -m bench.prefix_caching [--skip-plan] [--speed-only] [--repeats 3]

1. Figure 9: the prefix-cache hit rate (share of prompt tokens) against an LRU cache's capacity, the requests
   replayed in order with no compute as the paper did, beside the paper's figure (the traces' README).
2. Figure 10: ten prefill nodes of 3 M tokens each: local caches behind round robin, the prefix-aware router, and
   one host tier of 30 M tokens shared by the ten, beside the paper's local and shared figures.
3. The conversation trace through the engine simulation (arrivals, outputs, eviction under load): Llama-3.1-70B
   (Llama-3-70B's weights with a 128 k context: the trace's prompts reach 126 k tokens) on H100s, TP8.
4. What it does to a plan: the fewest TP8 engines serving the whole conversation trace at its own rate with TTFT
   p90 ≤ 2 s and TPOT p90 ≤ 50 ms, with prefix caching off, on (device memory), on with a host tier of 256 GB per
   device (PCIe Gen5), and with the prefix-aware router; each count found by doubling then bisecting, each a
   simulation of the whole trace.
5. Speed (median of repeats, server time): 10 000 requests of multi-turn sessions after a shared prefix (Llama-3-8B,
   one H100, then four replicas behind the prefix-aware router), target < 400 ms; the whole conversation trace,
   target < 2 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import adapters
import roofline
from hardware_db import load_hardware, load_models
from roofline.serving import EngineSpec, Requests, Scheduler, replay
from roofline.serving import requests as draw
from schemas.estimates import EstimateContext
from schemas.traces import TraceFormat

TRACES = Path(__file__).resolve().parents[1] / "validation" / "mooncake-traces"
FIGURE_9 = {
    "conversation": [0.05, 0.07, 0.09, 0.165, 0.33, 0.40, 0.40],
    "synthetic": [0.00, 0.02, 0.15, 0.30, 0.59, 0.66, 0.66],
}
CAPACITIES = [1e4, 1e5, 1e6, 3e6, 1e7, 1e8, 1e9]
FIGURE_10 = {"conversation": (0.17, 0.37), "synthetic": (0.27, 0.62)}
TTFT_P90, TPOT_P90 = 2.0, 0.05


def rows(name: str) -> list[dict[str, int]]:
    with gzip.open(TRACES / f"{name}_trace.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def engine(model: str, tensor: int, **kw: object) -> EngineSpec:
    hw = next(h for h in load_hardware() if h.slug == "h100-sxm")
    m = adapters.transformer(next(x for x in load_models() if x.slug == model), None)
    system = adapters.inference_system(hw, EstimateContext(hardware="h100-sxm"), None)
    run = roofline.InferenceRun(m, system, roofline.Workload.uniform(1, 1, 1), roofline.Parallelism(tensor=tensor))
    host = adapters.host_link(hw.interconnect)
    return EngineSpec(run, Scheduler(host_link_bytes_per_s=host, **kw))  # type: ignore[arg-type]


def conversation() -> Requests:
    data = (TRACES / "conversation_trace.jsonl.gz").read_bytes()
    trace = adapters.parse_trace(gzip.decompress(data), "application/x-ndjson", "conversation")
    assert trace.format is TraceFormat.mooncake
    return adapters.trace_requests(trace, 32)


def figures() -> None:
    print("Figure 9: hit rate (prompt tokens) against LRU capacity, replayed in order (paper in brackets)")
    print(f"{'trace':14}" + "".join(f"{c:>15.0e}" for c in CAPACITIES))
    for name in ("conversation", "synthetic"):
        data = rows(name)
        chains, prompts = [r["hash_ids"] for r in data], [r["input_length"] for r in data]
        got = [replay(chains, prompts, int(c), 512)[0] for c in CAPACITIES]
        print(f"{name:14}" + "".join(f"{g:8.3f} ({p:.3f})" for g, p in zip(got, FIGURE_9[name], strict=True)))
    print("\nFigure 10: ten prefill nodes of 3 M tokens (paper: local, one shared cache)")
    for name in ("conversation", "synthetic"):
        data = rows(name)
        chains, prompts = [r["hash_ids"] for r in data], [r["input_length"] for r in data]
        local = replay(chains, prompts, 3_000_000, 512, nodes=10)[0]
        aware = replay(chains, prompts, 3_000_000, 512, nodes=10, router="prefix_aware")[0]
        host = replay(chains, prompts, 3_000_000, 512, nodes=10, shared_host=30_000_000)[0]
        shared = replay(chains, prompts, 30_000_000, 512)[0]
        paper = FIGURE_10[name]
        print(f"{name:14} local {local:.3f} ({paper[0]:.2f})  prefix-aware {aware:.3f}  shared host tier {host:.3f}  "
              f"one 30 M cache {shared:.3f} ({paper[1]:.2f})")  # fmt: skip


VARIANTS = {
    "off": {"prefix_caching": False},
    "on": {"prefix_caching": True},
    "on + host 256 GB/device": {"prefix_caching": True, "host_cache_bytes": 256e9},
    "on + prefix-aware router": {"prefix_caching": True, "router": "prefix_aware"},
}


def simulate(req: Requests, spec: EngineSpec) -> tuple[roofline.serving.ServingEstimate, float]:
    t0 = time.perf_counter()
    est = roofline.serving.estimate_serving(spec, req)
    return est, time.perf_counter() - t0


def hit_rate(est: roofline.serving.ServingEstimate) -> float:
    if not est.caches:
        return 0.0
    return sum(c.hit_tokens for c in est.caches) / max(1, sum(c.prompt_tokens for c in est.caches))


def engines_needed(req: Requests, spec: EngineSpec) -> tuple[int, roofline.serving.ServingEstimate]:
    """The fewest replicas meeting both objectives: doubling, then bisecting."""

    def ok(r: int) -> tuple[bool, roofline.serving.ServingEstimate]:
        est, _ = simulate(req, replace(spec, replicas=r))
        return est.ttft_s.p90 <= TTFT_P90 and est.tpot_s.p90 <= TPOT_P90, est

    high = 1
    good, est = ok(high)
    while not good:
        high *= 2
        good, est = ok(high)
    low = high // 2
    best = est
    while high - low > 1:
        mid = (low + high) // 2
        good, e = ok(mid)
        if good:
            high, best = mid, e
        else:
            low = mid
    return high, best


def plan(req: Requests) -> None:
    print("\nThe conversation trace at its own rate (3.4 requests/s), Llama-3.1-70B, H100 TP8 engines:")
    print(f"{'prefix caching':26} {'engines':>7} {'devices':>7} {'hit rate':>8} {'TTFT p90':>8} {'TPOT p90':>8}")
    for label, options in VARIANTS.items():
        n, est = engines_needed(req, engine("llama-3.1-70b", 8, **options))
        print(f"{label:26} {n:7d} {8 * n:7d} {hit_rate(est):8.3f} {est.ttft_s.p90:8.2f} {est.tpot_s.p90 * 1e3:6.1f}ms")


def sessions(n: int) -> Requests:
    rng = np.random.default_rng(0)
    turns = draw.lengths(rng, n, "uniform", "turns", low=1, high=8)
    _session, previous = draw.sessions(rng, turns, n)
    new = draw.lengths(rng, n, "lognormal", "prompt", mean=300, std=150)
    out = draw.lengths(rng, n, "lognormal", "output", mean=200, std=100)
    prompt, hashes, starts = draw.sharing(new, out, 32, prefix_tokens=1024, previous=previous)
    heads = previous < 0
    arrival = np.zeros(n)
    arrival[heads] = draw.arrivals(rng, int(heads.sum()), 2.0)
    think = rng.uniform(2.0, 20.0, n)
    return Requests(prompt, out, arrival, 0, hashes, starts, 32, previous, think)


def speed(repeats: int, conv: Requests) -> None:
    print("\nSpeed (median of repeats, the surface built once):")
    req = sessions(10_000)
    cases = [
        ("10 000 session turns, shared prefix, 8B, 1 engine", req, engine("llama-3-8b", 1, prefix_caching=True)),
        ("the same without prefix caching", req, engine("llama-3-8b", 1)),
        ("the same, 4 engines, prefix-aware router", req,
         replace(engine("llama-3-8b", 1, prefix_caching=True, router="prefix_aware"), replicas=4)),
        ("conversation trace, 70B TP8, 4 engines", conv, replace(engine("llama-3.1-70b", 8, prefix_caching=True),
                                                                replicas=4)),
        ("the same without prefix caching", conv, replace(engine("llama-3.1-70b", 8), replicas=4)),
    ]  # fmt: skip
    for label, r, spec in cases:
        ready = roofline.serving.prepare(spec, r)
        times = []
        est = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            est = roofline.serving.estimate_serving(spec, r, prepared=ready)
            times.append(time.perf_counter() - t0)
        assert est is not None
        print(f"{label:50} {statistics.median(times) * 1e3:8.0f} ms  hit rate {hit_rate(est):.3f}  "
              f"iterations {est.iterations}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-plan", action="store_true")
    ap.add_argument("--speed-only", action="store_true", help="only the speed figures (section 5)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    conv = conversation()
    if args.speed_only:
        speed(args.repeats, conv)
        return 0
    figures()
    print("\nThe conversation trace through the engine (4 TP8 engines of Llama-3.1-70B on H100):")
    for label, options in VARIANTS.items():
        est, seconds = simulate(conv, replace(engine("llama-3.1-70b", 8, **options), replicas=4))
        print(f"{label:26} hit rate {hit_rate(est):.3f}  TTFT p90 {est.ttft_s.p90:6.2f} s  TPOT p90 "
              f"{est.tpot_s.p90 * 1e3:5.1f} ms  ({seconds:.1f} s to simulate)")  # fmt: skip
    if not args.skip_plan:
        plan(conv)
    speed(args.repeats, conv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
