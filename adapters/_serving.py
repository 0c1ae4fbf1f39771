"""Serving requests (`schemas.serving`) as the core's engines and requests (`roofline.serving`), and the core's
serving estimate as a `ServingRead` document."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import numpy as np

import roofline
from adapters._errors import InvalidField
from adapters._inference import SECONDS_PER_HOUR, inference_run, transformer
from adapters._lora import lora_read
from adapters._sharing import prefix_cache_read, shared_requests, trace_requests
from adapters._trace_sharing import shared_columns
from adapters._traces import Trace, trace_of
from roofline.serving import (
    EngineSpec,
    Lora,
    Objectives,
    Requests,
    Scheduler,
    ServingConfigError,
    ServingEstimate,
    Speculation,
)
from roofline.serving import requests as draw
from schemas import limits
from schemas.hardware import HardwareSpec, Interconnect
from schemas.inference import Implementation
from schemas.models import ModelSpec
from schemas.serving import EngineOptions, LengthKind, Lengths, Mode, ServingParallelism, ServingRequest
from schemas.traces import TraceFormat


def _scheduler(opts: EngineOptions, router: str = "round_robin", host: float = 0.0, lora: bool = False) -> Scheduler:
    """The core's scheduler; `host`: the profile's host link, bytes/s per direction (0: none); `lora`: the requests
    name adapters (the engine's LoRA options apply)."""
    return Scheduler(
        kind=str(opts.scheduler),
        max_num_seqs=opts.max_num_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens,
        block_size=opts.kv_block_tokens,
        kv_policy=str(opts.kv_policy),
        cuda_graphs=opts.cuda_graphs,
        iteration_overhead_s=opts.iteration_overhead_s,
        speculation=None
        if opts.speculative is None
        else Speculation(
            opts.speculative.draft_tokens, opts.speculative.accepted_tokens, opts.speculative.draft_layers
        ),
        prefix_caching=opts.prefix_caching,
        host_cache_bytes=opts.host_cache_bytes,
        host_link_bytes_per_s=host,
        router=router,
        lora=Lora(opts.max_loras, opts.max_cpu_loras or 0, opts.max_lora_rank) if lora else None,
    )


def host_link(interconnect: Interconnect) -> float:
    """The profile's host link (PCIe, or NVLink-C2C on Grace systems), bytes/s per direction; 0 without one."""
    return interconnect.host.bandwidth_per_direction_bytes_per_s if interconnect.host is not None else 0.0


def _engine(
    body: ServingRequest, model: roofline.Transformer, system: roofline.System, par: ServingParallelism,
    opts: EngineOptions, replicas: int, where: str, router: str = "round_robin", host: float = 0.0,
    lora: bool = False,
) -> EngineSpec:  # fmt: skip
    run = inference_run(
        model, system, roofline.Workload.uniform(1, 1, 1),
        roofline.Parallelism(par.tensor, par.pipeline, par.attention_data, par.expert), body.dtypes,
        Implementation(all_reduce=opts.all_reduce),
    )  # fmt: skip
    try:
        roofline.validate_inference(run)
    except roofline.InferenceConfigError as err:
        field = err.field.replace("parallelism.data", "parallelism.attention_data")
        raise InvalidField(f"{where}.{field}", err.message) from None
    return EngineSpec(run, _scheduler(opts, router, host, lora), replicas, opts.memory_fraction)


def _lengths(rng: np.random.Generator, spec: Lengths, count: int, field: str) -> np.ndarray:
    return draw.lengths(
        rng, count, str(spec.kind), field, value=float(spec.value or 0), low=float(spec.low or 0),
        high=float(spec.high or 0), mean=float(spec.mean or 0), std=float(spec.std or 0), values=spec.values,
    )  # fmt: skip


def serving_requests(body: ServingRequest, context_limit: int, trace: Trace | None = None) -> Requests:
    """The requests a load describes, drawn from one generator seeded with `load.seed`; `trace`: the stored trace
    `load.trace_id` names (the service reads it)."""
    load = body.load
    rng = np.random.default_rng(load.seed)
    if load.trace_id is not None or load.trace is not None:
        if load.trace is not None:  # checked as an uploaded trace is, its fields under body.load.trace
            where = "body.load.trace"
            r = load.trace
            trace = trace_of("load.trace", TraceFormat.json, [x.arrival_s for x in r], [x.prompt_tokens for x in r],
                             [x.output_tokens for x in r], field=where, shared=shared_columns(r))  # fmt: skip
        elif trace is None:
            raise ValueError("load.trace_id names a stored trace: pass it as `trace`")
        else:
            where = "body.load.trace_id"
        opts = body.engine if body.prefill is None else body.prefill.engine
        requests = trace_requests(trace, opts.kv_block_tokens)
    else:
        assert load.prompt_tokens is not None and load.output_tokens is not None
        prompt = _lengths(rng, load.prompt_tokens, load.requests, "body.load.prompt_tokens")
        output = _lengths(rng, load.output_tokens, load.requests, "body.load.output_tokens")
        where = "body.load.prompt_tokens"
        if load.prefix_tokens is not None or load.sessions is not None:
            opts = body.engine if body.prefill is None else body.prefill.engine
            requests = shared_requests(load, rng, prompt, output, opts.kv_block_tokens, context_limit)
            where = "body.load"
        elif load.concurrency is not None:
            requests = Requests(prompt, output, None, load.concurrency)
        else:
            assert load.rate_per_s is not None
            times = draw.arrivals(rng, load.requests, load.rate_per_s, str(load.arrival), load.arrival_cv)
            requests = Requests(prompt, output, times, 0)
    drawn = load.trace is None and load.trace_id is None and (load.prompt_tokens, load.output_tokens) != (None, None)
    if drawn and where != "body.load" and any(spec is not None and spec.kind is not LengthKind.fixed
                     for spec in (load.prompt_tokens, load.output_tokens)):  # fmt: skip
        # Lengths drawn from a distribution are cut at the model's context, as a client truncates its inputs.
        prompt = np.minimum(requests.prompt, context_limit - 1)
        output = np.minimum(requests.output, context_limit - prompt)
        requests = Requests(prompt, output, requests.arrival_s, requests.concurrency)
    total = requests.prompt + requests.output
    longest = int(total.max())
    if longest > context_limit:
        if where == "body.load.prompt_tokens" and int(requests.prompt[int(total.argmax())]) < context_limit:
            where = "body.load.output_tokens"  # the prompt fits: its output is what runs past the context
        raise InvalidField(
            where,
            f"a request of {longest} tokens (prompt and output) exceeds the model's context of {context_limit}",
        )
    return _with_adapters(body, requests, rng, trace)


def _with_adapters(body: ServingRequest, requests: Requests, rng: np.random.Generator, trace: Trace | None) -> Requests:
    """The requests' LoRA adapters: drawn (`load.adapters`, after everything else from the same generator, so that
    a load's other draws do not change), or a trace's adapter column (their rank the engine's max_lora_rank)."""
    load = body.load
    if load.adapters is not None:
        spec = load.adapters
        adapter = draw.adapters(rng, requests.count, spec.count, str(spec.popularity), spec.zipf_exponent)
        return replace(requests, adapter=adapter, adapter_rank=spec.rank)
    if trace is None or trace.sharing is None or trace.sharing.adapter is None:
        return requests
    opts = body.engine if body.prefill is None else body.prefill.engine
    return replace(requests, adapter=trace.sharing.adapter, adapter_rank=opts.max_lora_rank)


def estimate_serving(
    body: ServingRequest,
    model: tuple[ModelSpec, str],
    hardware: tuple[HardwareSpec, str, roofline.System],
    trace: Trace | None = None,
    should_stop: roofline.StopCheck | None = None,
) -> dict[str, Any]:
    """Simulate a serving request; the response as a plain dict with `ServingRead`'s fields. `trace`: the stored
    trace `load.trace_id` names. `roofline.Stopped` if `should_stop` answers true before the simulation ends."""
    model_spec, model_name = model
    hw_spec, hw_name, system = hardware
    host = host_link(hw_spec.interconnect)
    core_model = transformer(model_spec, None)
    requests = serving_requests(body, model_spec.max_context_tokens, trace)
    lora = requests.adapter is not None
    if body.mode is Mode.aggregated:
        front = _engine(body, core_model, system, body.parallelism, body.engine, body.replicas, "body",
                        str(body.router), host, lora)  # fmt: skip
        back = None
    else:
        assert body.prefill is not None and body.decode is not None
        pre, dec = body.prefill, body.decode
        front = _engine(body, core_model, system, pre.parallelism, pre.engine, pre.workers, "body.prefill",
                        str(body.router), host, lora)  # fmt: skip
        back = _engine(body, core_model, system, dec.parallelism, dec.engine, dec.workers, "body.decode",
                       host=host, lora=lora)  # fmt: skip
    if body.load.concurrency is not None and body.load.concurrency > body.load.requests:
        raise InvalidField("body.load.requests", f"at least the concurrency ({body.load.concurrency})")
    try:
        ready = roofline.serving.prepare(front, requests, back)
    except ServingConfigError as err:
        raise InvalidField(f"body.{err.field}", err.message) from None
    check_work(body, requests, ready)
    obj = body.objectives
    est = roofline.serving.estimate_serving(
        front,
        requests,
        Objectives(obj.ttft_s, obj.tpot_s, obj.e2e_s),
        back,
        body.series,
        prepared=ready,
        should_stop=should_stop or (lambda: False),
    )
    doc = render_serving(body, model_name, hw_name, est, ready)
    doc["prefix_cache"] = prefix_cache_read(est.caches, requests.hash_block)
    doc["lora"] = lora_read(est.lora, requests, ready)
    return doc


def check_work(body: ServingRequest, requests: Requests, ready: roofline.serving.ServingRun) -> None:
    """`InvalidField` when the simulation would run more event loops (aggregated) or route more engine × request
    pairs (disaggregated) than `schemas.limits` allows, before any runs."""
    n = requests.count
    if ready.back is None and roofline.serving.shared(requests, ready.front):
        engines = min(ready.front.engines, n)  # one loop over every engine: each event may look at all of them
        if engines * n > limits.MAX_SERVING_ENGINE_REQUESTS:
            raise InvalidField(
                "body.replicas",
                f"{engines} engines that share one loop (a router, prefix caches or sessions) × {n} requests is "
                f"{engines * n} engine-requests; at most {limits.MAX_SERVING_ENGINE_REQUESTS} are allowed: fewer "
                "replicas or requests",
            )
        return
    if ready.back is None:
        loops = roofline.serving.loops(requests, ready.front)
        if loops > limits.MAX_SERVING_LOOPS:
            raise InvalidField(
                "body.replicas",
                f"the {ready.front.engines} engines (replicas × pipeline × attention_data) get {loops} different "
                f"shares of the {n} requests, each simulated on its own; at most {limits.MAX_SERVING_LOOPS} are "
                "allowed: fewer replicas or requests (engines whose shares are alike, as with fixed lengths, share "
                "one)",
            )
        return
    front, back = min(ready.front.engines, n), min(ready.back.engines, n)
    if (front + back) * n > limits.MAX_SERVING_ENGINE_REQUESTS:
        pool = "prefill" if front >= back else "decode"
        raise InvalidField(
            f"body.{pool}.workers",
            f"{front} prefill and {back} decode engines that get requests × {n} requests is "
            f"{(front + back) * n} engine-requests to simulate in one loop; at most "
            f"{limits.MAX_SERVING_ENGINE_REQUESTS} are allowed: fewer workers or requests",
        )


def band_stats(dist: roofline.serving.Distribution, factors: tuple[float, float] | None) -> dict[str, Any]:
    """A distribution as `Stats`, with its mean's prediction interval (`factors` on the mean; null without)."""
    low, high = factors if factors is not None else (None, None)
    return asdict(dist) | {
        "mean_p10": dist.mean * low if low is not None else None,
        "mean_p90": dist.mean * high if high is not None else None,
    }


SERVING_INTERVAL = (
    "p10-p90 of the means and throughputs: every op at its band's edge together (leave-one-device-out residuals, "
    "python -m bench.intervals), each iteration class at its mean mix, the simulated schedule held"
)


def render_serving(
    body: ServingRequest, model_name: str, hw_name: str, est: ServingEstimate, ready: roofline.serving.ServingRun
) -> dict[str, Any]:
    cost = None
    if body.price_per_device_hour is not None and est.output_tokens_per_s > 0:
        per_s = body.price_per_device_hour * ready.devices / SECONDS_PER_HOUR
        cost = per_s / est.output_tokens_per_s * 1e6
    band = est.band

    def rate(value: float, edge: int) -> float | None:  # a throughput's edge: over the other edge of the duration
        return value / band.duration[1 - edge] if band is not None and band.duration[1 - edge] > 0 else None

    doc = {
        "model": model_name,
        "hardware": hw_name,
        "mode": str(body.mode),
        "devices": ready.devices,
        "requests": est.requests,
        "duration_s": est.duration_s,
        "requests_per_s": est.requests_per_s,
        "output_tokens_per_s": est.output_tokens_per_s,
        "output_tokens_per_s_per_device": est.output_tokens_per_s_per_device,
        "output_tokens_per_s_per_user": est.output_tokens_per_s_per_user,
        "requests_per_s_p10": rate(est.requests_per_s, 0),
        "requests_per_s_p90": rate(est.requests_per_s, 1),
        "output_tokens_per_s_p10": rate(est.output_tokens_per_s, 0),
        "output_tokens_per_s_p90": rate(est.output_tokens_per_s, 1),
        "ttft_s": band_stats(est.ttft_s, band.ttft if band else None),
        "tpot_s": band_stats(est.tpot_s, band.tpot if band else None),
        "e2e_s": band_stats(est.e2e_s, band.e2e if band else None),
        "queue_s": asdict(est.queue_s),
        "mean_in_system": est.mean_in_system,
        "mean_batch": est.mean_batch,
        "mean_kv_cache_use": est.mean_kv_use,
        "kv_cache_blocks": list(ready.kv_blocks),
        "preemptions": est.preemptions,
        "prefill_share": est.prefill_share,
        "iterations": est.iterations,
        "max_batched_tokens": est.max_batched_tokens,
        "goodput_requests_per_s": est.goodput_requests_per_s,
        "goodput_fraction": est.goodput_fraction,
        "cost_per_million_output_tokens": cost,
        "surface_error": ready.surface_error,
        "assumptions": {
            "method": "iteration-level simulation; iteration times from the inference core's surface, interpolated",
            "timing": "kernel time as CUDA-graph replay unless cuda_graphs is false",
            "kv_transfer_s_per_prompt_token": ready.transfer_s if ready.transfer_s is not None else 0.0,
            "statistics": "over every simulated request, ramp-up and drain included",
            "interval": SERVING_INTERVAL if band is not None else "none",
        },
        "series": None,
    }
    if body.series:
        adapters = est.series_adapters or [0] * len(est.series)
        doc["series"] = [
            {"start_s": a, "duration_s": b, "decoding": c, "prefill_tokens": d, "kv_cache_use": e, "adapters": n}
            for (a, b, c, d, e), n in zip(est.series, adapters, strict=True)
        ]
    return doc


def live_serving(
    body: ServingRequest, model: ModelSpec, system: roofline.System, longest: int
) -> roofline.serving.LiveServing:
    """The engines of an aggregated deployment, to serve requests as they come (`ridgeline emulate`): their
    iteration-time surface covers requests of up to `longest` tokens (prompt and output)."""
    if body.mode is not Mode.aggregated:
        raise InvalidField("body.mode", "the emulated engine serves aggregated deployments")
    longest = min(longest, model.max_context_tokens)
    front = _engine(body, transformer(model, None), system, body.parallelism, body.engine, body.replicas, "body")
    shape = Requests(np.array([max(1, longest - 1)]), np.array([1]), None, 1)  # the longest request served
    try:
        ready = roofline.serving.prepare(front, shape)
    except ServingConfigError as err:
        raise InvalidField(f"body.{err.field}", err.message) from None
    return roofline.serving.LiveServing(ready.front, longest)
