"""What a serving estimate holds: throughput, latency distributions, the engines' state over the run, goodput."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from roofline.serving._config import Requests
from roofline.serving._lora import LoraStats
from roofline.serving._prefix import CacheStats
from roofline.serving._simulator import Pool, Trace

_T = TypeVar("_T")


@dataclass(frozen=True)
class Distribution:
    mean: float
    p50: float
    p90: float
    p99: float

    @staticmethod
    def of(values: np.ndarray) -> Distribution:
        if values.size == 0:
            return Distribution(0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = np.percentile(values, [50, 90, 99]).tolist()
        return Distribution(float(values.mean()), p50, p90, p99)


@dataclass(frozen=True)
class Objectives:
    """Latency objectives a request must meet to count towards goodput (seconds; None: no bound)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


@dataclass(frozen=True)
class ServingBand:
    """A run's prediction interval as factors on its figures (p10 / figure ≤ 1 ≤ p90 / figure): `ttft` on time to
    first token, `tpot` on time per output token, `e2e` on end to end and `duration` on the run's length (its
    throughputs take the inverse)."""

    ttft: tuple[float, float]
    tpot: tuple[float, float]
    e2e: tuple[float, float]
    duration: tuple[float, float]


def band_factors(trace: Trace, front: Pool, back: Pool | None) -> ServingBand | None:
    """The run's interval, every op at its band's edge together (docs/model/intervals.md): each iteration class's
    time at its mean mix on the band's surfaces over its time on the surface (fixed iteration costs unbanded);
    iterations with prefill chunks give time to first token, the run's iteration time by class its length; the
    decode pool's time per output token when disaggregated, else the run's. None without an interval table. The
    schedule is held as simulated: exact for a closed loop on one engine whose iterations all move by one factor."""
    decode_pool = back or front
    if front.surface.band is None or decode_pool.surface.band is None or trace.busy_s <= 0:
        return None
    mixed, decode = (1.0, 1.0), (1.0, 1.0)
    if trace.mixed_s > 0:
        t, d = trace.mixed_tokens_s / trace.mixed_s, trace.mixed_decoding_s / trace.mixed_s
        c = trace.mixed_context_s / trace.mixed_s
        over, spec = front.scheduler.iteration_overhead_s, front.scheduler.speculation
        sampled = d * (1.0 if spec is None else spec.width) + 1.0
        mid = front.surface.time(t, [(t, 0.0)], d, c, sampled, spec) + over
        low, high = (s.time(t, [(t, 0.0)], d, c, sampled, spec) + over for s in front.surface.band)
        mixed = (min(low / mid, 1.0), max(high / mid, 1.0))
    if trace.decode_s > 0:
        d, c = trace.decode_decoding_s / trace.decode_s, trace.decode_context_s / trace.decode_s
        if d > 0:
            over, spec = decode_pool.scheduler.iteration_overhead_s, decode_pool.scheduler.speculation
            mid = decode_pool.surface.decode_time(d, c, spec) + over
            low, high = (s.decode_time(d, c, spec) + over for s in decode_pool.surface.band)
            decode = (min(low / mid, 1.0), max(high / mid, 1.0))
    share = trace.mixed_s / (trace.mixed_s + trace.decode_s)
    run = tuple(share * m + (1.0 - share) * d for m, d in zip(mixed, decode, strict=True))
    whole = (run[0], run[1])
    return ServingBand(mixed if trace.mixed_s > 0 else whole, decode if back is not None else whole, whole, whole)


@dataclass(frozen=True)
class ServingEstimate:
    requests: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    output_tokens_per_s_per_user: float  # mean over requests of their decode rate (1 / their time per output token)
    ttft_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    queue_s: Distribution
    mean_in_system: float  # requests between arrival and end, time-averaged (Little's L)
    mean_batch: float  # sequences per iteration, time-averaged over busy time
    mean_kv_use: float  # fraction of the KV pool in use, time-averaged over busy time
    prefill_share: float  # the prefill tokens' share of iteration time
    iterations: int
    preemptions: int
    goodput_requests_per_s: float
    goodput_fraction: float
    max_batched_tokens: int
    series: list[tuple[float, float, int, int, float]] = field(default_factory=list)
    band: ServingBand | None = None  # the prediction interval's factors (None: no interval table)
    caches: list[CacheStats] | None = None  # prefix caching: per engine of the front pool (None: no cache)
    lora: list[LoraStats] | None = None  # LoRA adapters: per engine (None: none named)
    series_adapters: list[int] = field(default_factory=list)  # distinct adapters of each `series` iteration


def summarise(trace: Trace, requests: Requests, devices: int, objectives: Objectives,
              band: ServingBand | None = None) -> ServingEstimate:  # fmt: skip
    arrival, first, end = np.array(trace.arrival), np.array(trace.first), np.array(trace.end)
    admit = np.array(trace.admit)
    out = requests.output.astype(np.float64)
    start = float(arrival.min())
    duration = float(end.max()) - start
    ttft = first - arrival
    e2e = end - arrival
    multi = out > 1
    tpot = (end[multi] - first[multi]) / (out[multi] - 1.0)
    tokens = float(out.sum())
    ok = np.ones(out.size, dtype=bool)
    if objectives.ttft_s is not None:
        ok &= ttft <= objectives.ttft_s
    if objectives.tpot_s is not None:
        per = np.zeros(out.size)
        per[multi] = tpot
        ok &= per <= objectives.tpot_s
    if objectives.e2e_s is not None:
        ok &= e2e <= objectives.e2e_s
    busy = max(trace.busy_s, 1e-30)
    user = 1.0 / tpot[tpot > 0] if tpot.size else np.zeros(0)
    return ServingEstimate(
        requests=int(out.size),
        duration_s=duration,
        requests_per_s=out.size / duration,
        output_tokens_per_s=tokens / duration,
        output_tokens_per_s_per_device=tokens / duration / devices,
        output_tokens_per_s_per_user=float(user.mean()) if user.size else 0.0,
        ttft_s=Distribution.of(ttft),
        tpot_s=Distribution.of(tpot),
        e2e_s=Distribution.of(e2e),
        queue_s=Distribution.of(admit - arrival),
        mean_in_system=float(e2e.sum()) / duration,
        mean_batch=trace.batch_s / busy,
        mean_kv_use=trace.kv_s / busy,
        prefill_share=trace.prefill_s / busy,
        iterations=trace.iterations,
        preemptions=trace.preemptions,
        goodput_requests_per_s=float(ok.sum()) / duration,
        goodput_fraction=float(ok.mean()),
        max_batched_tokens=trace.max_batched_tokens,
        series=_thin(trace.series or [], 2000),
        series_adapters=_thin(trace.adapters or [], 2000),
        band=band,
        caches=trace.caches,
        lora=trace.lora,
    )


def _thin(series: list[_T], limit: int) -> list[_T]:
    if len(series) <= limit:
        return series
    step = len(series) / limit
    return [series[int(i * step)] for i in range(limit)]
