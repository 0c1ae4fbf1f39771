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
from adapters._plan_traffic import demand_requests_per_s, traffic_lengths, traffic_sample
from adapters._serving import _scheduler, band_stats
from adapters._traces import Trace
from roofline.serving import Deployment, EngineSpec, Requests, Targets
from schemas import limits
from schemas.inference import Dtypes, Implementation
from schemas.models import ModelSpec
from schemas.plan import PlanRequest, Role
from schemas.serving import Mode

MAX_INVALID_LISTED = 20
# A plan run without a `should_stop` (a library caller's) stops simulating after this long and says how many
# candidates it left (`unfinished`, `partial`). The service passes its own, which stops a little before the
# request's time limit (service.heavy.stopper), so a plan in a request uses the time the request has.
PLAN_DEADLINE_S = 15.0


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


def _spec(
    body: PlanRequest, model: roofline.Transformer, system: roofline.System, c: Candidate, u: Shape,
    runs: dict[tuple[Any, ...], roofline.InferenceRun], host_link: float = 0.0, lora: bool = False,
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
    host = host_link if u.role is not Role.decode or lora else 0.0  # LoRA loads cross every engine's host link
    return EngineSpec(run, _scheduler(opts, host=host, lora=lora), u.workers, opts.memory_fraction)


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
    lora = sample is not None and sample.adapter is not None
    all_candidates = candidates(body, len(hardware))
    deployments: list[Deployment] = []
    kept: list[Candidate] = []
    invalid: list[str] = []
    runs: dict[tuple[Any, ...], roofline.InferenceRun] = {}
    for c in all_candidates:
        hw = hardware[c.hardware]
        try:
            specs = [_spec(body, core_model, hw.system, c, u, runs, hw.host_link_bytes_per_s, lora) for u in c.units]
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
    """The prepared search run in this process. It stops when `should_stop` answers true (the service's: a little
    before the request's time limit), or without one after `PLAN_DEADLINE_S`, and ranks what it has."""
    until = time.monotonic() + PLAN_DEADLINE_S

    def stop() -> bool:
        return should_stop() if should_stop is not None else time.monotonic() >= until

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
    `traffic.trace_id` names. The search stops when `should_stop` answers true (without one, after
    `PLAN_DEADLINE_S`) and ranks what it has."""
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
