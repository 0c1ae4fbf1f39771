"""Turn inference requests into roofline runs and the core's estimates into responses. No formulas here.

Hardware is resolved and mapped exactly as for op estimates (`service.estimates.service.resolve_hardware` and
`to_core`); the model comes from the catalogue or inline; `roofline.inference` does the rest.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy.orm import Session

import roofline
from schemas.common import ErrorDetail
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareSpec
from schemas.inference import (
    AttentionKind,
    AttentionOverride,
    InferenceBatchRead,
    InferenceBatchRequest,
    InferenceRead,
    InferenceRequest,
)
from schemas.models import FfnKind, ModelSpec, NormKind, Positional
from service.calibrations.runs import CalibrationUse, for_runs, row_calibration, summary
from service.catalogue import service as catalogue
from service.catalogue.loopread import DigestReader
from service.catalogue.service import MODELS
from service.collectives.service import device_topology
from service.errors import Unprocessable, details_from_validation, validation_message
from service.estimates.service import invalid, resolve_hardware, resolve_hardware_on_loop, to_core

SECONDS_PER_HOUR = 3600.0


def resolve_model(session: Session, ref: str | ModelSpec) -> tuple[ModelSpec, str]:
    """The model a run uses: a catalogue entry or an inline config."""
    if isinstance(ref, str):
        return catalogue.get_spec(session, MODELS, ref), ref
    return ref, getattr(ref, "slug", ref.name)


async def resolve_model_on_loop(reader: DigestReader, ref: str | ModelSpec) -> tuple[ModelSpec, str] | None:
    """`resolve_model` with one digest read on the event loop and the parse cache; None: ask `resolve_model`."""
    if not isinstance(ref, str):
        return ref, getattr(ref, "slug", ref.name)
    spec = await catalogue.spec_on_loop(reader, MODELS, ref)
    return None if spec is None else (spec, ref)


def transformer(spec: ModelSpec, override: AttentionOverride | None, where: str = "body") -> roofline.Transformer:
    """The core's view of a model config, with the attention what-if applied."""
    window_layers = 0
    if spec.sliding_window_layers == "all":
        window_layers = spec.layers
    elif spec.sliding_window_layers == "alternate":
        window_layers = spec.layers // 2
    moe = None
    if spec.moe is not None:
        moe = roofline.Moe(
            experts=spec.moe.experts, top_k=spec.moe.top_k, expert_ffn=spec.moe.expert_ffn_size,
            shared_experts=spec.moe.shared_experts, dense_layers=min(spec.moe.dense_layers, spec.layers),
        )  # fmt: skip
    model = roofline.Transformer(
        layers=spec.layers,
        hidden=spec.hidden_size,
        heads=spec.heads,
        kv_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        ffn=spec.ffn_size,
        gated=spec.ffn_kind is FfnKind.gated,
        activation=str(spec.activation),
        vocab=spec.vocab_size,
        tied_embeddings=spec.tied_embeddings,
        rms_norm=spec.norm is NormKind.rmsnorm,
        rotary=spec.positional is Positional.rotary,
        position_table=spec.max_context_tokens if spec.positional is Positional.learned else 0,
        bias=spec.bias,
        window=spec.sliding_window_tokens,
        window_layers=window_layers,
        moe=moe,
        mla=None
        if spec.mla is None
        else roofline.Mla(
            kv_lora_rank=spec.mla.kv_lora_rank,
            rope_dim=spec.mla.qk_rope_head_dim,
            nope_dim=spec.mla.qk_nope_head_dim,
            v_dim=spec.mla.v_head_dim,
            q_lora_rank=spec.mla.q_lora_rank,
        ),
    )
    if override is None:
        return model
    if spec.mla is not None:
        raise invalid(f"{where}.attention", "the model uses multi-head latent attention: no MHA/MQA/GQA what-if")
    kv_heads = {AttentionKind.mha: spec.heads, AttentionKind.mqa: 1}.get(override.kind, override.kv_heads or 0)
    if spec.heads % kv_heads:
        raise invalid(
            f"{where}.attention.kv_heads", f"{kv_heads} KV heads do not divide the model's {spec.heads} heads"
        )
    return model.with_kv_heads(kv_heads)


def topologies(spec: HardwareSpec) -> Callable[[int], roofline.Topology] | None:
    """The collective topology of n devices of the profile (`service.collectives.service.device_topology`), made
    once per n; None when the profile has no fabric at all."""
    ic = spec.interconnect
    if ic.scale_up is None and ic.host is None and ic.scale_out is None:
        return None

    @functools.cache
    def topology(devices: int) -> roofline.Topology:
        return device_topology(spec, devices)

    return topology


@dataclass
class Prepared:
    """A request turned into a core run, with what the response needs besides the estimate."""

    request: InferenceRequest
    run: roofline.InferenceRun
    model: ModelSpec
    model_name: str
    hardware: HardwareSpec
    hardware_name: str
    data: int
    where: str
    calibration: CalibrationUse | None = None  # options.calibration for this profile (None: "none")


class Resolver:
    """Resolves models and hardware once per distinct reference within one request (a batch repeats them).

    Without a session (`on_loop`) it holds only what was resolved before it was made: the event loop's path."""

    def __init__(self, session: Session | None) -> None:
        self.session = session
        self.models: dict[str, tuple[ModelSpec, str]] = {}
        self.hardware: dict[str, tuple[HardwareSpec, str, roofline.System, CalibrationUse | None]] = {}

    @staticmethod
    def _model_key(ref: Any) -> str:
        return ref if isinstance(ref, str) else json.dumps(ref.model_dump(mode="json"), sort_keys=True)

    @staticmethod
    def _system_key(body: EstimateContext) -> str:
        return json.dumps(
            body.model_dump(mode="json", include={"hardware", "hardware_patch", "options"}), sort_keys=True
        )

    def model(self, ref: Any) -> tuple[ModelSpec, str]:
        key = self._model_key(ref)
        if key not in self.models:
            assert self.session is not None, "a resolver without a session holds what it was given"
            self.models[key] = resolve_model(self.session, ref)
        return self.models[key]

    def system(
        self, body: EstimateContext, where: str = "body"
    ) -> tuple[HardwareSpec, str, roofline.System, CalibrationUse | None]:
        """The profile, its name, the core's system (with the calibration's corrector) and the calibration use."""
        key = self._system_key(body)
        if key not in self.hardware:
            assert self.session is not None, "a resolver without a session holds what it was given"
            spec, name = resolve_hardware(self.session, body)
            slug = body.hardware if isinstance(body.hardware, str) and not body.hardware_patch else None
            use = for_runs(self.session, slug, body.options.calibration, f"{where}.options.calibration")
            self.hardware[key] = self._built(spec, name, body, use)
        return self.hardware[key]

    @staticmethod
    def _built(
        spec: HardwareSpec, name: str, body: EstimateContext, use: CalibrationUse | None
    ) -> tuple[HardwareSpec, str, roofline.System, CalibrationUse | None]:
        power = spec.power.tdp_w if spec.power else None
        correct = use.corrector if use is not None else None
        return spec, name, roofline.System(to_core(spec, body), topologies(spec), power, correct), use

    @classmethod
    async def on_loop(cls, reader: DigestReader, body: InferenceRequest) -> Resolver | None:
        """A resolver for one request whose model and profile one digest read each settles on the event loop, without
        a calibration (service.estimates.router says why); None: resolve through a session."""
        if body.options.calibration != "none":
            return None
        model = await resolve_model_on_loop(reader, body.model)
        hardware = await resolve_hardware_on_loop(reader, body) if model is not None else None
        if model is None or hardware is None:
            return None
        resolver = cls(None)
        resolver.models[cls._model_key(body.model)] = model
        resolver.hardware[cls._system_key(body)] = cls._built(*hardware, body, None)
        return resolver


def prepare(resolver: Resolver, body: InferenceRequest, where: str = "body") -> Prepared:
    model_spec, model_name = resolver.model(body.model)
    hw_spec, hw_name, system, calibration = resolver.system(body, where)
    par = body.parallelism
    tp = par.tensor * par.pipeline
    if par.data is not None:
        data = par.data
        if body.devices is not None and body.devices != tp * data:
            raise invalid(
                f"{where}.devices",
                f"{body.devices} devices for tensor {par.tensor} × pipeline {par.pipeline} × data {data} = {tp * data}",
            )
    elif body.devices is not None:
        if body.devices % tp:
            raise invalid(
                f"{where}.devices", f"{body.devices} devices are not whole replicas of tensor × pipeline = {tp}"
            )
        data = body.devices // tp
    else:
        data = 1
    wl = body.workload
    if wl.requests is not None:
        workload = roofline.Workload(
            np.array([r.prompt_tokens for r in wl.requests], dtype=np.int64),
            np.array([r.output_tokens for r in wl.requests], dtype=np.int64),
        )
    else:
        assert wl.batch is not None and wl.prompt_tokens is not None and wl.output_tokens is not None
        workload = roofline.Workload.uniform(wl.batch, wl.prompt_tokens, wl.output_tokens)
    dt = body.dtypes
    run = roofline.InferenceRun(
        model=transformer(model_spec, body.attention, where),
        system=system,
        workload=workload,
        parallelism=roofline.Parallelism(par.tensor, par.pipeline, data, par.expert, par.micro_batches),
        precision=roofline.Precision(str(dt.weights), str(dt.activations), str(dt.kv_cache or dt.activations)),
        attention=str(body.implementation.attention),
        fused=body.implementation.fused,
        decode_samples=body.implementation.decode_samples,
    )
    return Prepared(body, run, model_spec, model_name, hw_spec, hw_name, data, where, calibration)


def evaluate(prepared: Sequence[Prepared]) -> list[roofline.InferenceEstimate]:
    """Every run's ops evaluated together; a run that cannot be built is a 422 naming its field."""
    try:
        return roofline.estimate_inferences([p.run for p in prepared])
    except roofline.InferenceConfigError as err:
        where = prepared[err.index].where if err.index is not None else "body"
        raise invalid(f"{where}.{err.field}", err.message) from None


def _phase(phase: roofline.PhaseEstimate) -> dict[str, Any]:
    total = phase.time_s
    return {
        "time_s": total,
        "raw_time_s": phase.raw_time_s,
        "communication_time_s": sum(phase.communication_s.values()),
        "ops": [
            {
                "op": r.name, "calls_per_pass": r.calls, "flops": r.flops, "bytes": r.bytes, "time_s": r.time_s,
                "compute_time_s": r.compute_s, "memory_time_s": r.memory_s, "overhead_s": r.overhead_s,
                "bound": r.bound, "share": r.time_s / total if total > 0 else 0.0, "raw_time_s": r.raw_time_s,
                "calibration": row_calibration(r),
            }
            for r in phase.rows
        ],
    }  # fmt: skip


def render(p: Prepared, est: roofline.InferenceEstimate) -> dict[str, Any]:
    """The response of one run, as a plain dict with `InferenceRead`'s fields."""
    body, run = p.request, p.run
    replica_devices = run.parallelism.tensor * run.parallelism.pipeline
    devices = replica_devices * p.data
    total = est.total_time_s
    throughput = est.output_tokens * p.data / total if total > 0 else 0.0
    mem = est.memory
    comm = {"tensor_parallel": 0.0, "pipeline": 0.0, "expert": 0.0}
    for phase in (est.prefill, est.decode):
        for k, v in phase.communication_s.items():
            comm[k] += v
    price = body.price_per_device_hour
    cost = price * devices / SECONDS_PER_HOUR / throughput * 1e6 if price is not None and throughput > 0 else None
    power = run.system.power_w
    energy = power * replica_devices * total / est.output_tokens if power is not None else None
    warnings = []
    if not mem.fits:
        warnings.append(
            f"does not fit: {mem.total_bytes / 1e9:.1f} GB per device of {mem.capacity_bytes / 1e9:.1f} GB "
            f"(largest batch that fits: {est.max_batch_that_fits})"
        )
    longest = int((run.workload.prompt_tokens + run.workload.output_tokens - 1).max())  # the last is never fed back
    if longest > p.model.max_context_tokens:
        warnings.append(f"{longest} tokens exceed the model's context of {p.model.max_context_tokens}")
    return {
        "model": p.model_name,
        "hardware": p.hardware_name,
        "devices": devices,
        "parallelism": {
            "tensor": run.parallelism.tensor,
            "pipeline": run.parallelism.pipeline,
            "data": p.data,
            "expert": run.parallelism.expert,
            "micro_batches": est.assumptions["micro_batches"],
        },
        "batch": run.workload.batch,
        "prefill_time_s": est.prefill.time_s,
        "decode_step_s": {
            "steps": est.decode_steps,
            "first_s": est.decode_first_step_s,
            "mean_s": est.decode_mean_step_s,
            "last_s": est.decode_last_step_s,
        },
        "time_per_output_token_s": est.decode_mean_step_s,
        "decode_time_s": est.decode.time_s,
        "total_time_s": total,
        "throughput_tokens_per_s": throughput,
        "memory": {
            "weights_bytes": mem.weights_bytes,
            "kv_cache_bytes": mem.kv_cache_bytes,
            "activation_bytes": mem.activation_bytes,
            "total_bytes": mem.total_bytes,
            "capacity_bytes": mem.capacity_bytes,
            "headroom_bytes": mem.capacity_bytes - mem.total_bytes,
            "fits": mem.fits,
        },
        "max_batch_that_fits": est.max_batch_that_fits,
        "communication_time_s": est.communication_s,
        "communication": {
            "total_s": est.communication_s,
            "tensor_parallel_s": comm["tensor_parallel"],
            "pipeline_s": comm["pipeline"],
            "expert_s": comm["expert"],
        },
        "pipeline_bubble_fraction": est.pipeline_bubble_fraction,
        "parameters": vars(est.parameters),
        "breakdown": {"prefill": _phase(est.prefill), "decode": _phase(est.decode)},
        "price_per_device_hour": price,
        "cost_per_million_tokens": cost,
        "power_per_device_w": power,
        "energy_per_token_j": energy,
        "warnings": warnings,
        "assumptions": {
            **est.assumptions,
            "efficiency": {
                "matmul": run.system.hardware.eff_matmul,
                "vector": run.system.hardware.eff_vector,
                "memory": run.system.hardware.eff_memory,
                "interconnect": p.hardware.efficiency.interconnect,
            },
            "launch_overhead_s": run.system.hardware.launch_s,
            "attention": run.attention,
            "fused": run.fused,
            "dtypes": vars(run.precision),
            "calibration": summary(p.calibration, {"prefill": est.prefill.rows, "decode": est.decode.rows}),
        },
    }


def estimate(source: Session | Resolver, body: InferenceRequest) -> InferenceRead:
    """One run, resolved through a session, or by a resolver that already holds its model and profile."""
    resolver = source if isinstance(source, Resolver) else Resolver(source)
    prepared = prepare(resolver, body)
    return InferenceRead.model_validate(render(prepared, evaluate([prepared])[0]))


def _sweep_items(body: InferenceBatchRequest) -> tuple[list[tuple[InferenceRequest, str]], dict[str, list[Any]]]:
    """The requests of a sweep's grid (first path varies slowest), each with where its errors point."""
    assert body.sweep is not None
    base = body.sweep.base.model_dump(mode="json", exclude_unset=True)
    paths = list(body.sweep.vary)
    grid: dict[str, list[Any]] = {path: [] for path in paths}
    items = []
    for values in itertools.product(*(body.sweep.vary[path] for path in paths)):
        doc = json.loads(json.dumps(base))
        for path, value in zip(paths, values, strict=True):
            grid[path].append(value)
            *parents, leaf = path.split(".")
            node = doc
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        try:
            items.append((InferenceRequest.model_validate(doc), "body.sweep.base"))
        except ValidationError as err:
            detail = []
            for d in details_from_validation(list(err.errors())):
                field = d.field or ""
                varied = next((p for p in paths if field == p or field.startswith(p + ".")), None)
                where = f"body.sweep.vary.{varied}" if varied else f"body.sweep.base.{field}"
                point = ", ".join(f"{p}={v}" for p, v in zip(paths, values, strict=True))
                detail.append(ErrorDetail(field=where, message=f"{d.message} ({point})", type=d.type))
            raise Unprocessable(validation_message(detail), detail) from None
    return items, grid


def estimate_batch(session: Session, body: InferenceBatchRequest) -> InferenceBatchRead:
    resolver = Resolver(session)
    grid = None
    if body.items is not None:
        requests = [(item, f"body.items.{i}") for i, item in enumerate(body.items)]
    else:
        requests, grid = _sweep_items(body)
    prepared = [prepare(resolver, item, where) for item, where in requests]
    estimates = evaluate(prepared)
    return InferenceBatchRead.model_validate(
        {"items": [render(p, e) for p, e in zip(prepared, estimates, strict=True)], "grid": grid}
    )
