"""How fast the serving simulator answers: 10 000 requests through `roofline.serving`, the surface built and the
simulation run, as `POST /v1/estimate/serving` does them (median of repeats; machines are noisy).

    python -m bench.serving_speed [--requests 10000] [--repeats 7]

Cases: Llama-3-8B on one H100 and Llama-3-70B on TP4, a closed loop of 256 clients (2 048 / 256 tokens), with the
chunked, continuous and static schedulers, and an open Poisson loop at 8 requests/s with log-normal lengths.
Target (issue 20): 10 000 requests in under 300 ms of server time.

And a fleet (issue 39): Llama-3-8B on 2²⁰ replicas under 4 096 clients with log-normal lengths, each client's
requests on an engine of its own, every engine's share different: 4 096 event loops, the most an aggregated
estimate may run (`schemas.limits.MAX_SERVING_LOOPS`).

And LoRA (issue 41): the open loop with 64 adapters of rank 16 by Zipf's law, `max_loras` 4 and 1.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np

import adapters
import roofline
from hardware_db import load_hardware, load_models
from roofline.serving import EngineSpec, Lora, Requests, Scheduler
from roofline.serving import requests as draw
from schemas.estimates import EstimateContext


def _case(model: str, tensor: int, kind: str) -> EngineSpec:
    spec = next(h for h in load_hardware() if h.slug == "h100-sxm")
    m = adapters.transformer(next(x for x in load_models() if x.slug == model), None)
    system = adapters.inference_system(spec, EstimateContext(hardware="h100-sxm"), None)
    run = roofline.InferenceRun(m, system, roofline.Workload.uniform(1, 1, 1), roofline.Parallelism(tensor=tensor))
    return EngineSpec(run, Scheduler(kind=kind, host_link_bytes_per_s=adapters.host_link(spec.interconnect)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    n = args.requests
    closed = Requests(np.full(n, 2048), np.full(n, 256), None, 256)
    rng = np.random.default_rng(0)
    prompts = draw.lengths(rng, n, "lognormal", "prompt", mean=1500, std=800)
    outputs = draw.lengths(rng, n, "lognormal", "output", mean=300, std=150)
    open_loop = Requests(np.minimum(prompts, 7000), outputs, draw.arrivals(rng, n, 8.0), 0)
    fleet = Requests(np.minimum(prompts, 7000), outputs, None, 4096)
    lora = replace(open_loop, adapter=draw.adapters(rng, n, 64, "zipf", 1.0), adapter_rank=16)
    cases: list[tuple[str, int, str, Requests, int, Lora | None]] = [
        ("llama-3-8b", 1, "chunked", closed, 1, None), ("llama-3-8b", 1, "continuous", closed, 1, None),
        ("llama-3-8b", 1, "static", closed, 1, None), ("llama-3-70b", 4, "chunked", closed, 1, None),
        ("llama-3-8b", 1, "chunked", open_loop, 1, None), ("llama-3-8b", 1, "chunked", fleet, 1 << 20, None),
        ("llama-3-8b", 1, "chunked", lora, 1, Lora(max_loras=4)), ("llama-3-8b", 1, "chunked", lora, 1, Lora()),
    ]  # fmt: skip
    print(f"{'case':52} {'surface ms':>10} {'simulate ms':>11} {'total ms':>9} {'iterations':>10} {'loops':>6}")
    for model, tensor, kind, req, replicas, adapters_on in cases:
        spec = replace(_case(model, tensor, kind), replicas=replicas)
        spec = replace(spec, scheduler=replace(spec.scheduler, lora=adapters_on))
        if kind == "static":
            spec = replace(spec, scheduler=replace(spec.scheduler, max_num_seqs=64))
        build, sim = [], []
        est = None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ready = roofline.serving.prepare(spec, req)
            t1 = time.perf_counter()
            est = roofline.serving.estimate_serving(spec, req, prepared=ready)
            t2 = time.perf_counter()
            build.append(t1 - t0)
            sim.append(t2 - t1)
        b, s = statistics.median(build) * 1e3, statistics.median(sim) * 1e3
        loop = f"closed {req.concurrency}" if req.concurrency else "poisson 8/s"
        loop += f" ×{replicas} replicas" if replicas > 1 else ""
        loop += f" lora max_loras {adapters_on.max_loras}" if adapters_on is not None else ""
        loops = roofline.serving.loops(req, ready.front)
        assert est is not None
        print(f"{model + ' tp' + str(tensor) + ' ' + kind + ' ' + loop:52} {b:10.1f} {s:11.1f} {b + s:9.1f} "
              f"{est.iterations:10d} {loops:6d}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
