"""Plan requests (`schemas.plan`) → the candidates of `roofline.serving.plan_serving`, and its `ServingPlan` → a
`PlanRead` document with each fleet's launch commands (`adapters._plan_export`)."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import roofline
from adapters._errors import InvalidField
from adapters._inference import SECONDS_PER_HOUR, inference_run, transformer
from adapters._plan_export import Shape, export
from adapters._serving import _lengths, _scheduler, band_stats
from adapters._sharing import shared_requests, trace_requests
from adapters._traces import Trace
from roofline.serving import Deployment, EngineSpec, Requests, Targets
from schemas import limits
from schemas.inference import Dtypes, Implementation
from schemas.models import ModelSpec
from schemas.plan import PlanRequest, Role
from schemas.serving import Lengths, Load, Mode

MAX_INVALID_LISTED = 20
LENGTH_SAMPLES = 4096
# A plan stops simulating after this long (or earlier, when the caller's `should_stop` says so) and says how many
# candidates it left (`unfinished`, `partial`): the answer comes well inside the service's 30 s request limit
# whatever the search (service.settings.request_timeout_s).
PLAN_DEADLINE_S = 15.0


SESSION_WAVE = 64  # sessions whose turns a plan interleaves: a session's next turn comes ~64 requests later


@dataclass(frozen=True)
class Hardware:
    name: str
    system: roofline.System
    host_link_bytes_per_s: float = 0.0  # the profile's host link (0: none)


@dataclass(frozen=True)
class Candidate:
    hardware: int
    mode: Mode
    dtypes: Dtypes
    units: tuple[Shape, ...]  # aggregated: one; disaggregated: prefill, decode
    caching: bool = True  # prefix caching
    host: float = 0.0  # host tier bytes per device

    def label(self, hardware: str) -> str:
        parts = [hardware, self.mode.value]
        for u in self.units:
            role = "" if u.role is Role.aggregated else f"{u.role.value} {u.workers}× "
            par = (
                f"TP{u.tensor}"
                + (f" PP{u.pipeline}" if u.pipeline > 1 else "")
                + (f" EP{u.expert}" if u.expert > 1 else "")
            )
            parts.append(f"{role}{par} seqs {u.max_num_seqs} tokens {u.max_num_batched_tokens}")
        d = self.dtypes
        parts.append(f"{d.weights.value}/{d.activations.value}" + (f" kv {d.kv_cache.value}" if d.kv_cache else ""))
        if not self.caching:  # the engines' default, prefix caching without a host tier, goes without saying
            parts.append("no prefix cache")
        elif self.host:
            parts.append(f"prefix cache + host {self.host / 1e9:g} GB")
        return " · ".join(parts)


def _length_array(spec: int | Lengths, rng: np.random.Generator, field: str, context: int) -> np.ndarray:
    if isinstance(spec, int):
        return np.array([spec], dtype=np.int64)
    drawn: np.ndarray = np.minimum(_lengths(rng, spec, LENGTH_SAMPLES, field), context - 1)
    return drawn


def traffic_lengths(body: PlanRequest, context: int, trace: Trace | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The requests' lengths: fixed, or drawn once (seeded); drawn lengths are cut at the model's context. A stored
    trace (`trace`, the one `traffic.trace_id` names): `LENGTH_SAMPLES` of its requests drawn with replacement
    (seeded), each keeping its own prompt and output, none cut: a request beyond the context is an error."""
    t = body.traffic
    rng = np.random.default_rng(t.seed)
    if t.trace_id is not None:
        if trace is None:
            raise ValueError("traffic.trace_id names a stored trace: pass it as `trace`")
        pick = rng.integers(0, trace.prompt_tokens.size, LENGTH_SAMPLES)
        prompt, output = trace.prompt_tokens[pick], trace.output_tokens[pick]
        longest = int((trace.prompt_tokens + trace.output_tokens).max())
        if longest > context:
            raise InvalidField(
                "body.traffic.trace_id",
                f"the trace has a request of {longest} tokens (prompt and output): the model's context is {context}",
            )
        return prompt, output
    assert t.prompt_tokens is not None and t.output_tokens is not None
    prompt = _length_array(t.prompt_tokens, rng, "body.traffic.prompt_tokens", context)
    output = _length_array(t.output_tokens, rng, "body.traffic.output_tokens", context)
    if prompt.size != output.size:
        prompt, output = np.resize(prompt, LENGTH_SAMPLES), np.resize(output, LENGTH_SAMPLES)
    output = np.minimum(output, np.maximum(context - prompt, 1))
    longest = int((prompt + output).max())
    if longest > context:
        raise InvalidField(
            "body.traffic.prompt_tokens",
            f"a request of {longest} tokens (prompt and output) exceeds the model's context of {context}",
        )
    return prompt, output


def demand_requests_per_s(body: PlanRequest, output: np.ndarray, trace: Trace | None = None) -> float:
    """Requests per second to serve: the rate given, or the output-token rate over the mean output; a trace with
    neither: its own mean arrival rate."""
    t = body.traffic
    if t.requests_per_s is not None:
        return t.requests_per_s
    if t.output_tokens_per_s is not None:
        return t.output_tokens_per_s / float(output.mean())
    assert trace is not None
    rate = trace.summary()["rate_per_s"]
    if rate is None:
        raise InvalidField(
            "body.traffic.trace_id", "the trace's requests all arrive at once: it has no rate; give requests_per_s"
        )
    return float(rate)


def candidates(body: PlanRequest, hardware_count: int) -> list[Candidate]:
    """Every candidate of the search, in a fixed order (hardware, dtypes, mode, parallelism, batch, budget)."""
    s, e = body.search, body.engine
    out: list[Candidate] = []
    caching = s.caching(e)
    for h, dtypes, mode in itertools.product(range(hardware_count), s.dtypes, s.modes):
        for p, x, seqs, budget in itertools.product(s.pipeline, s.expert, s.max_num_seqs, s.max_num_batched_tokens):
            if mode is Mode.aggregated:
                for t, (cache, host) in itertools.product(s.tensor, caching):
                    unit = (Shape(Role.aggregated, 1, t, p, x, seqs, budget),)
                    out.append(Candidate(h, mode, dtypes, unit, cache, host))
                continue
            for r, tp, td, (cache, host) in itertools.product(s.ratios, s.tensor, s.tensor, caching):
                prefill = Shape(Role.prefill, r.prefill, tp, p, x, e.max_num_seqs, budget)
                decode = Shape(Role.decode, r.decode, td, p, x, seqs, max(seqs, e.max_num_batched_tokens))
                out.append(Candidate(h, mode, dtypes, (prefill, decode), cache, host))
    return out


def engine_options(body: PlanRequest, c: Candidate) -> Any:
    """The request's engine options with the candidate's prefix caching and host tier."""
    return body.engine.model_copy(update={"prefix_caching": c.caching, "host_cache_bytes": c.host})


def traffic_sample(body: PlanRequest, context: int, trace: Trace | None = None) -> Requests | None:
    """The traffic's requests when they share prefixes, in the order the planner replays them (None: they share
    nothing): drawn as a serving load's (`LENGTH_SAMPLES` of them; sessions' turns interleaved `SESSION_WAVE`
    sessions at a time, so that a turn comes after the one before it has ended), or a stored trace's in order
    (at most `roofline.serving` check's most requests; its sessions' turns as recorded)."""
    t = body.traffic
    block = body.engine.kv_block_tokens
    if trace is not None and trace.sharing is not None:
        shared = trace_requests(trace, block)
        if shared.hashes is None:
            return None
        keep = min(shared.count, 20_000)
        return _first(shared, keep)
    if t.prefix_tokens is None and t.sessions is None:
        return None
    assert t.prompt_tokens is not None and t.output_tokens is not None
    lengths = [v if isinstance(v, Lengths) else Lengths(value=v) for v in (t.prompt_tokens, t.output_tokens)]
    load = Load(
        rate_per_s=1.0, requests=LENGTH_SAMPLES, prompt_tokens=lengths[0], output_tokens=lengths[1],
        prefix_tokens=t.prefix_tokens, prefix_groups=t.prefix_groups, sessions=t.sessions, seed=t.seed,
    )  # fmt: skip
    rng = np.random.default_rng(t.seed)
    new = np.minimum(_lengths(rng, lengths[0], LENGTH_SAMPLES, "body.traffic.prompt_tokens"), context - 1)
    out = np.minimum(_lengths(rng, lengths[1], LENGTH_SAMPLES, "body.traffic.output_tokens"), context - 1)
    try:
        shared = shared_requests(load, rng, new, out, block, context)
    except InvalidField as err:
        raise InvalidField(err.field.replace("body.load", "body.traffic"), err.message) from None
    if shared.after is None:
        return replace_order(shared, np.arange(shared.count))
    # turn k of each session in a wave of SESSION_WAVE sessions, then turn k + 1 of each, …
    first = shared.after < 0
    session = np.cumsum(first) - 1
    turn = np.arange(shared.count) - np.flatnonzero(first)[session]
    order = np.lexsort((session, turn, session // SESSION_WAVE))
    return replace_order(shared, order)


def _first(r: Requests, n: int) -> Requests:
    assert r.hashes is not None and r.hash_starts is not None
    starts = r.hash_starts[: n + 1]
    return Requests(r.prompt[:n], r.output[:n], None, 0, r.hashes[: int(starts[-1])], starts, r.hash_block)


def replace_order(r: Requests, order: np.ndarray) -> Requests:
    """The requests in `order`, their chains with them, without arrivals or sessions' timing."""
    assert r.hashes is not None and r.hash_starts is not None
    counts = np.diff(r.hash_starts)[order]
    starts = np.zeros(order.size + 1, dtype=np.int64)
    starts[1:] = np.cumsum(counts)
    pieces = [r.hashes[r.hash_starts[i] : r.hash_starts[i + 1]] for i in order.tolist()]
    hashes = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return Requests(r.prompt[order], r.output[order], None, 0, hashes, starts, r.hash_block)


def _spec(
    body: PlanRequest, model: roofline.Transformer, system: roofline.System, c: Candidate, u: Shape,
    runs: dict[tuple[Any, ...], roofline.InferenceRun], host_link: float = 0.0,
) -> EngineSpec:  # fmt: skip
    key = (c.hardware, c.dtypes.model_dump_json(), u.tensor, u.pipeline, u.expert)
    run = runs.get(key)
    if run is None:
        run = inference_run(
            model, system, roofline.Workload.uniform(1, 1, 1),
            roofline.Parallelism(tensor=u.tensor, pipeline=u.pipeline, expert=u.expert), c.dtypes,
            Implementation(all_reduce=body.engine.all_reduce),
        )  # fmt: skip
        roofline.validate_inference(run)  # the layout on the profile's fabric too (whole nodes)
        runs[key] = run
    opts = engine_options(body, c).model_copy(
        update={"max_num_seqs": u.max_num_seqs, "max_num_batched_tokens": u.max_num_batched_tokens}
    )
    host = host_link if u.role is not Role.decode else 0.0
    return EngineSpec(run, _scheduler(opts, host=host), u.workers, opts.memory_fraction)


@dataclass(frozen=True)
class PlanOutcome:
    """The core's plan, the `PlanRead` document, and each entry's group (hardware and mode) for the chart."""

    plan: roofline.serving.ServingPlan
    doc: dict[str, Any]
    groups: list[str]


@dataclass(frozen=True)
class PlanSearch:
    """A plan request mapped onto the core's search: the deployments that can be built (`kept`, in candidate order,
    with their prices), the traffic's lengths and rate (and its requests with their hash chains, `sample`, when they
    share prefixes), the objectives, and what could not be built (`invalid`)."""

    body: PlanRequest
    model_spec: ModelSpec
    model_name: str
    hardware: list[Hardware]
    searched: int
    kept: list[Candidate]
    deployments: list[Deployment]
    prices: list[float | None]
    invalid: list[str]
    prompt: np.ndarray
    output: np.ndarray
    demand: float
    targets: Targets
    sample: Requests | None = None


def prepare_plan(
    body: PlanRequest, model: tuple[ModelSpec, str], hardware: list[Hardware], trace: Trace | None = None
) -> PlanSearch:
    """The request's search space as core deployments; `trace`: the stored trace `traffic.trace_id` names."""
    model_spec, model_name = model
    core_model = transformer(model_spec, None)
    prompt, output = traffic_lengths(body, model_spec.max_context_tokens, trace)
    sample = traffic_sample(body, model_spec.max_context_tokens, trace)
    if sample is not None:
        prompt, output = sample.prompt, sample.output
    demand = demand_requests_per_s(body, output, trace)
    all_candidates = candidates(body, len(hardware))
    deployments: list[Deployment] = []
    kept: list[Candidate] = []
    invalid: list[str] = []
    runs: dict[tuple[Any, ...], roofline.InferenceRun] = {}
    for c in all_candidates:
        hw = hardware[c.hardware]
        try:
            specs = [_spec(body, core_model, hw.system, c, u, runs, hw.host_link_bytes_per_s) for u in c.units]
        except ValueError as err:
            invalid.append(f"{c.label(hw.name)}: {err}")
            continue
        deployments.append(Deployment(specs[0], specs[1] if len(specs) > 1 else None))
        kept.append(c)
    prices = [body.prices.get(hardware[c.hardware].name) for c in kept]
    o = body.objectives
    targets = Targets(o.ttft_s, o.tpot_s, o.e2e_s, o.percentile.value, o.margin)
    return PlanSearch(body, model_spec, model_name, hardware, len(all_candidates), kept, deployments, prices, invalid,
                      prompt, output, demand, targets, sample)  # fmt: skip


def finish_plan(search: PlanSearch, result: roofline.serving.ServingPlan) -> PlanOutcome:
    """The core's plan as a `PlanRead` document (or the error that says why nothing could run)."""
    body, hardware, kept = search.body, search.hardware, search.kept
    invalid = list(search.invalid)
    for i, field, message in result.invalid:
        c = kept[i]
        invalid.append(f"{c.label(hardware[c.hardware].name)}: {field}: {message}")
    if not result.entries and not result.pruned and not result.unfinished:
        shown = "; ".join(invalid[:3])
        if result.invalid and all(field == "traffic" for _, field, _ in result.invalid):
            raise InvalidField(
                "body.traffic",
                f"every candidate that runs needs a fleet of more than {limits.MAX_DEVICES} devices for this traffic: "
                f"{shown}",
            )
        raise InvalidField(
            "body.search",
            f"none of the {search.searched} candidates can run (more devices per engine, narrower dtypes or a "
            f"larger engine.memory_fraction may): {shown}",
        )
    doc = render(body, search.model_spec, search.model_name, hardware, kept, result, search.demand, search.prompt,
                 search.output, search.searched, len(invalid))  # fmt: skip
    doc["invalid"] = invalid[:MAX_INVALID_LISTED]
    groups = [f"{hardware[kept[e.index].hardware].name} · {kept[e.index].mode.value}" for e in result.entries]
    return PlanOutcome(result, doc, groups)


def plan_in_process(s: PlanSearch, should_stop: roofline.StopCheck | None = None) -> PlanOutcome:
    """The prepared search run in this process. It stops after `PLAN_DEADLINE_S` or when `should_stop` answers
    true, whichever comes first, and ranks what it has."""
    until = time.monotonic() + PLAN_DEADLINE_S

    def stop() -> bool:
        return time.monotonic() >= until or (should_stop is not None and should_stop())

    body = s.body
    result = roofline.serving.plan_serving(
        s.deployments, s.prices, s.prompt, s.output, s.targets, s.demand, body.max_results, body.traffic.seed,
        body.search.max_devices, limits.MAX_DEVICES, stop, s.sample,
    )  # fmt: skip
    return finish_plan(s, result)


def plan_serving(
    body: PlanRequest, model: tuple[ModelSpec, str], hardware: list[Hardware], trace: Trace | None = None,
    should_stop: roofline.StopCheck | None = None,
) -> PlanOutcome:  # fmt: skip
    """Search the request's space in this process (`prepare_plan`, `plan_in_process`); `trace`: the stored trace
    `traffic.trace_id` names. The search stops after `PLAN_DEADLINE_S` or when `should_stop` answers true, whichever
    comes first, and ranks what it has."""
    return plan_in_process(prepare_plan(body, model, hardware, trace), should_stop)


def _figures(p: roofline.serving.Point) -> dict[str, Any]:
    band = p.band
    return {
        "clients": p.clients or None, "requests_per_s": p.requests_per_s, "output_tokens_per_s": p.output_tokens_per_s,
        "output_tokens_per_s_per_device": p.output_tokens_per_s_per_device,
        "output_tokens_per_s_per_user": p.output_tokens_per_s_per_user,
        "ttft_s": band_stats(p.ttft_s, band.ttft if band else None),
        "tpot_s": band_stats(p.tpot_s, band.tpot if band else None),
        "e2e_s": band_stats(p.e2e_s, band.e2e if band else None), "preemptions": p.preemptions,
    }  # fmt: skip


def _check(c: roofline.serving.Check) -> dict[str, Any]:
    return {"objective": c.objective, "target": c.target, "predicted": c.predicted, "ratio": c.ratio}


def render(
    body: PlanRequest, model_spec: ModelSpec, model_name: str, hardware: list[Hardware], kept: list[Candidate],
    result: roofline.serving.ServingPlan, demand: float, prompt: np.ndarray, output: np.ndarray, searched: int,
    invalid: int,
) -> dict[str, Any]:  # fmt: skip
    demand_tokens_per_s = demand * float(output.mean())
    longest = int((prompt + output).max())

    def candidate(rank: int, e: roofline.serving.Entry) -> dict[str, Any]:
        c = kept[e.index]
        hw = hardware[c.hardware]
        engines = []
        for u, blocks in zip(c.units, e.point.kv_blocks, strict=True):
            engines.append({"role": u.role.value, "workers": u.workers, "tensor": u.tensor, "pipeline": u.pipeline,
                            "expert": u.expert, "max_num_seqs": u.max_num_seqs,
                            "max_num_batched_tokens": u.max_num_batched_tokens, "kv_cache_blocks": blocks})  # fmt: skip
        price = e.price_per_device_hour
        cost = e.cost_per_hour
        binding = max(e.checks, key=lambda x: x.ratio, default=None)
        dep = e.deployment
        specs = [dep.front] + ([dep.back] if dep.back is not None else [])
        return {
            "rank": rank, "label": c.label(hw.name), "hardware": hw.name, "mode": c.mode.value,
            "dtypes": c.dtypes.model_dump(mode="json"), "engines": engines, "devices_per_unit": dep.devices,
            "units": e.sized.units, "devices": e.sized.devices, "utilisation": e.sized.utilisation,
            "operating_point": _figures(e.point),
            "at_traffic": _figures(e.sized.at_traffic) if e.sized.at_traffic is not None else None,
            "meets": e.meets, "binding": _check(binding) if binding else None,
            "misses": [_check(m) for m in e.misses],
            "price_per_device_hour": price, "cost_per_hour": cost,
            "cost_per_million_tokens":
                None if cost is None else cost / SECONDS_PER_HOUR / demand_tokens_per_s * 1e6,
            "surface_error": e.point.surface_error,
            "export": export(model_spec, model_name, engine_options(body, c), c.dtypes, c.units, specs, e.sized.units,
                             longest),
        }  # fmt: skip

    frontier = []
    for i in result.frontier:
        e = result.entries[i]
        c = kept[e.index]
        frontier.append({
            "label": c.label(hardware[c.hardware].name), "hardware": hardware[c.hardware].name, "mode": c.mode.value,
            "output_tokens_per_s_per_user": e.point.output_tokens_per_s_per_user,
            "output_tokens_per_s_per_device": e.point.output_tokens_per_s_per_device,
            "meets_at_operating_point": not e.point.misses,
        })  # fmt: skip
    return {
        "model": model_name, "demand_requests_per_s": demand, "percentile": body.objectives.percentile.value,
        "margin": body.objectives.margin,
        "ranked_by": result.ranked_by,
        "feasible": [candidate(r, e) for r, e in enumerate(result.feasible, start=1)],
        "closest": [candidate(r, e) for r, e in enumerate(result.closest, start=1)],
        "frontier": frontier, "candidates": searched, "evaluated": len(result.entries),
        "checked_at_traffic": result.checked, "pruned": result.pruned,
        "unfinished": result.unfinished, "partial": result.stopped, "invalid": [], "invalid_count": invalid,
        "assumptions": {
            "operating_point": "a closed loop of max_num_seqs clients per decoding engine; the first wave (all "
            "arriving at t = 0) and the last (the loop draining) are left out; throughput by Little's law",
            "traffic_check": "one unit's share of the traffic as Poisson arrivals (random routing); a fleet that "
            "misses there gets more units (10 % at a time)",
            "method": "iteration-level simulation; iteration times from the inference core's surface (no calibration)",
            "timing": "kernel time as CUDA-graph replay unless engine.cuda_graphs is false",
            "margin": "objectives checked on the simulated latencies" if body.objectives.margin == "estimate" else
            "objectives checked at the upper edge of the latencies' prediction interval, units sized on the lower "
            "edge of a unit's closed-loop throughput (its figures here); the traffic check's schedule held",
        },
    }  # fmt: skip
