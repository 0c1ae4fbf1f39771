"""The capacity planner: every configuration of the search estimated in one batch, sized to the traffic and ranked.

No formulas here beyond the arithmetic of sizing a fleet: replicas = ⌈demand / what one replica serves⌉, where a
replica serving batches of B requests back to back serves B / (prefill + decode) requests per second.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareSpec
from schemas.inference import Dtypes, InferenceRead, InferenceRequest
from schemas.models import ModelSpec
from schemas.plan import Miss, Objective, PlanCandidate, PlanRead, PlanRequest, RankedBy
from service.inference.service import Resolver

MAX_SKIPPED_LISTED = 20


class _System(NamedTuple):
    spec: HardwareSpec
    name: str
    system: roofline.System
    calibration: adapters.CalibrationUse | None


@dataclass
class _Config:
    hardware_index: int
    hardware_name: str
    tensor: int
    pipeline: int
    batch: int
    dtypes: Dtypes
    run: roofline.InferenceRun


def _groups(tensor: int, pipeline: int) -> list[int]:
    """The collective groups a replica uses: the tensor group and, with a pipeline, the span of its stages."""
    return [n for n in (tensor, tensor * pipeline if pipeline > 1 else 1) if n > 1]


def plan(session: Session, body: PlanRequest) -> PlanRead:
    """Estimate every configuration of the search, size each to the traffic and rank them."""
    resolver = Resolver(session)
    model_spec, model_name = resolver.model(body.model)
    model = adapters.transformer(model_spec, None)
    traffic, s = body.traffic, body.search
    systems = []
    for ref in body.hardware:
        # options.calibration per profile: "latest" is each profile's own (the physical model, with a note, for one
        # that has none); an id must be the calibration of every profile searched.
        spec, name, system, calibration = resolver.system(EstimateContext(hardware=ref, options=body.options))
        systems.append(_System(spec, name, system, calibration))

    configs: list[_Config] = []
    skipped: list[str] = []
    for (index, (_, name, system, _)), t, p, dtypes in itertools.product(
        enumerate(systems), s.tensor, s.pipeline, s.dtypes
    ):
        label = f"{name} tensor {t} pipeline {p} weights {dtypes.weights} activations {dtypes.activations}"
        runs = [
            adapters.inference_run(
                model,
                system,
                roofline.Workload.uniform(batch, traffic.prompt_tokens, traffic.output_tokens),
                roofline.Parallelism(tensor=t, pipeline=p),
                dtypes,
                body.implementation,
            )
            for batch in s.batch
        ]
        try:
            roofline.validate_inference(runs[0])
            for group in _groups(t, p):
                if system.topology is None:
                    raise roofline.InferenceConfigError("hardware", f"{name} has no interconnect")
                system.topology(group)
        except ValueError as err:
            skipped.append(f"{label}: {err}")
            continue
        for batch, run in zip(s.batch, runs, strict=True):
            configs.append(_Config(index, name, t, p, batch, dtypes, run))

    estimates = roofline.estimate_inferences([c.run for c in configs]) if configs else []
    priced = all(sys.name in body.prices for sys in systems)
    candidates = [_candidate(body, c, e) for c, e in zip(configs, estimates, strict=True)]
    order = sorted(range(len(candidates)), key=lambda i: _rank(candidates[i], priced))
    feasible = [i for i in order if candidates[i].meets][: body.max_results]
    closest: list[int] = []
    if not feasible:
        closest = sorted(order, key=lambda i: (_worst(candidates[i]), _rank(candidates[i], priced)))[: body.max_results]
    for i in feasible + closest:
        candidates[i].estimate = _estimate(body, configs[i], estimates[i], model_spec, model_name, systems)
    return PlanRead(
        feasible=[candidates[i] for i in feasible],
        closest=[candidates[i] for i in closest],
        ranked_by=RankedBy.cost if priced else RankedBy.devices,
        evaluated=len(configs),
        skipped=skipped[:MAX_SKIPPED_LISTED],
        skipped_count=len(skipped) * len(s.batch),
    )


def _candidate(body: PlanRequest, c: _Config, est: roofline.InferenceEstimate) -> PlanCandidate:
    traffic, objectives = body.traffic, body.objectives
    total = est.total_time_s
    requests_per_s = c.batch / total
    tokens_per_s = est.output_tokens / total
    if traffic.requests_per_s is not None:
        demand, served = traffic.requests_per_s, requests_per_s
        demand_requests_per_s = traffic.requests_per_s
    else:
        demand, served = traffic.output_tokens_per_s or 0.0, tokens_per_s
        demand_requests_per_s = demand / traffic.output_tokens
    replicas = max(1, math.ceil(demand / served))
    per_replica = c.tensor * c.pipeline
    devices = replicas * per_replica
    price = body.prices.get(c.hardware_name)
    cost_per_hour = price * devices if price is not None else None
    # The fleet is paid for whole and serves the traffic, not its capacity: cost over the tokens the traffic asks for.
    demand_tokens_per_s = demand_requests_per_s * traffic.output_tokens
    cost_per_million = cost_per_hour / 3600.0 / demand_tokens_per_s * 1e6 if cost_per_hour is not None else None
    mem = est.memory
    misses = []

    def check(objective: Objective, target: float | None, predicted: float | None) -> None:
        if target is not None and predicted is not None and predicted > target:
            misses.append(Miss(objective=objective, target=target, predicted=predicted, ratio=predicted / target))

    check(Objective.memory, mem.capacity_bytes, mem.total_bytes)
    check(Objective.time_to_first_token_s, objectives.time_to_first_token_s, est.prefill.time_s)
    check(Objective.time_per_output_token_s, objectives.time_per_output_token_s, est.decode_mean_step_s)
    check(Objective.max_devices, float(body.search.max_devices) if body.search.max_devices else None, float(devices))
    return PlanCandidate(
        hardware=c.hardware_name,
        tensor=c.tensor,
        pipeline=c.pipeline,
        batch=c.batch,
        dtypes=c.dtypes,
        devices_per_replica=per_replica,
        replicas=replicas,
        devices=devices,
        time_to_first_token_s=est.prefill.time_s,
        time_per_output_token_s=est.decode_mean_step_s,
        requests_per_s_per_replica=requests_per_s,
        output_tokens_per_s_per_replica=tokens_per_s,
        utilisation=demand / (served * replicas),
        batch_fill_s=c.batch * replicas / demand_requests_per_s,
        memory_per_device_bytes=mem.total_bytes,
        capacity_bytes=mem.capacity_bytes,
        fits=mem.fits,
        price_per_device_hour=price,
        cost_per_hour=cost_per_hour,
        cost_per_million_tokens=cost_per_million,
        meets=not misses,
        misses=misses,
    )


def _rank(c: PlanCandidate, priced: bool) -> tuple[float, ...]:
    first = c.cost_per_hour if priced and c.cost_per_hour is not None else float(c.devices)
    return (first, float(c.devices), c.time_per_output_token_s or 0.0, c.time_to_first_token_s)


def _worst(c: PlanCandidate) -> float:
    return max((m.ratio for m in c.misses), default=1.0)


def _estimate(
    body: PlanRequest,
    c: _Config,
    est: roofline.InferenceEstimate,
    model_spec: ModelSpec,
    model_name: str,
    systems: list[_System],
) -> InferenceRead:
    """The full estimate of one replica, as `POST /v1/estimate/inference` would answer it."""
    sys = systems[c.hardware_index]
    request = InferenceRequest.model_validate(
        {
            "model": model_name if isinstance(body.model, str) else body.model,
            "hardware": body.hardware[c.hardware_index],
            "options": body.options,
            "parallelism": {"tensor": c.tensor, "pipeline": c.pipeline},
            "workload": {
                "batch": c.batch,
                "prompt_tokens": body.traffic.prompt_tokens,
                "output_tokens": body.traffic.output_tokens,
            },
            "dtypes": c.dtypes,
            "implementation": body.implementation,
            "price_per_device_hour": body.prices.get(c.hardware_name),
        }
    )
    prepared = adapters.Prepared(
        request, c.run, model_spec, model_name, sys.spec, c.hardware_name, 1, "body", sys.calibration
    )
    return InferenceRead.model_validate(adapters.render_run(prepared, est))
