"""Serving deployments under load: an iteration-level simulation of an engine's scheduler (static batching,
in-flight batching, chunked prefill; aggregated or disaggregated prefill and decode), each iteration costed by the
inference core through a precomputed iteration-time surface (`_surface`), the KV cache as a paged pool.

`estimate_serving` takes the engines (`EngineSpec`: an `InferenceRun` whose model, system, parallelism and precision
describe one replica; its workload is ignored), the requests (`Requests`, drawn with `roofline.serving.requests`)
and latency objectives, and returns a `ServingEstimate`.

Sources: Yu et al., "Orca" (OSDI 2022) for iteration-level scheduling; Kwon et al., "PagedAttention / vLLM" (SOSP
2023) for the paged KV pool and recompute preemption; Agrawal et al., "Sarathi-Serve" (OSDI 2024) for chunked
prefills under a token budget; Zhong et al., "DistServe" (OSDI 2024) and Patel et al., "Splitwise" (ISCA 2024) for
disaggregated prefill and decode; Leviathan et al. (ICML 2023) and DeepSeek-V3's multi-token prediction for
speculative decoding; Little (1961) for L = λW.
"""

from __future__ import annotations

from roofline._stop import StopCheck, never
from roofline.serving._config import (
    KV_POLICIES,
    ROUTERS,
    SCHEDULERS,
    Lora,
    Requests,
    Scheduler,
    ServingConfigError,
    Speculation,
)
from roofline.serving._deploy import (
    EngineSpec,
    PoolMemory,
    ServingRun,
    host_blocks,
    kv_pool_blocks,
    pool_memory,
    prepare,
    transfer_function,
)
from roofline.serving._live import LiveServing, TokenEvent
from roofline.serving._lora import LORA_RANKS, LoraStats, adapter_bytes, flops_per_token, kernel_surface
from roofline.serving._plan import (
    Check,
    Deployment,
    Entry,
    Point,
    ServingPlan,
    Sized,
    SurfaceCache,
    Targets,
    check_at_traffic,
    operating_point,
    pareto,
    size,
)
from roofline.serving._prefix import CacheStats, replay
from roofline.serving._results import Distribution, Objectives, ServingBand, ServingEstimate, band_factors, summarise
from roofline.serving._search import Evaluated, evaluate, families, plan_serving, reduce, surface_cache
from roofline.serving._simulator import Pool, Trace, loops, shared, simulate
from roofline.serving._surface import IterationSurface

__all__ = [
    "KV_POLICIES",
    "LORA_RANKS",
    "ROUTERS",
    "SCHEDULERS",
    "CacheStats",
    "Check",
    "Deployment",
    "Distribution",
    "EngineSpec",
    "Entry",
    "Evaluated",
    "IterationSurface",
    "LiveServing",
    "Lora",
    "LoraStats",
    "Objectives",
    "Point",
    "Pool",
    "PoolMemory",
    "Requests",
    "Scheduler",
    "ServingBand",
    "ServingConfigError",
    "ServingEstimate",
    "ServingPlan",
    "ServingRun",
    "Sized",
    "Speculation",
    "SurfaceCache",
    "Targets",
    "TokenEvent",
    "Trace",
    "adapter_bytes",
    "band_factors",
    "check_at_traffic",
    "estimate_serving",
    "evaluate",
    "families",
    "flops_per_token",
    "host_blocks",
    "kernel_surface",
    "kv_pool_blocks",
    "loops",
    "operating_point",
    "pareto",
    "plan_serving",
    "pool_memory",
    "prepare",
    "reduce",
    "replay",
    "shared",
    "simulate",
    "size",
    "surface_cache",
]


def estimate_serving(
    front: EngineSpec,
    requests: Requests,
    objectives: Objectives | None = None,
    back: EngineSpec | None = None,
    series: bool = False,
    transfer_free: bool = False,
    prepared: ServingRun | None = None,
    should_stop: StopCheck = never,
) -> ServingEstimate:
    """Simulate `requests` on the engines: aggregated (`front` serves both phases) or disaggregated (`front` the
    prefill workers, `back` the decode workers). `Stopped` if `should_stop` answers true (asked every
    `CHECK_EVERY` events)."""
    ready = prepared or prepare(front, requests, back, transfer_free)
    trace = simulate(requests, ready.front, ready.back, transfer_function(ready), series, should_stop)
    band = band_factors(trace, ready.front, ready.back)
    return summarise(trace, requests, ready.devices, objectives or Objectives(), band)
