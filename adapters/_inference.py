"""Inference requests (`schemas.inference`) and model configs (`schemas.models`) as the core's runs
(`roofline.InferenceRun`), and the core's inference estimates as `InferenceRead` documents. Hardware is mapped exactly
as for op estimates (`to_core`), collectives as for collective estimates (`device_topology`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import roofline
from adapters._calibration import CalibrationUse, row_calibration, run_summary
from adapters._collectives import device_topology
from adapters._errors import InvalidField
from adapters._hardware import cache_state, to_core
from adapters._intervals import interval_table
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareSpec
from schemas.inference import AttentionKind, AttentionOverride, Dtypes, Implementation, InferenceRequest
from schemas.models import FfnKind, ModelSpec, NormKind, Positional

SECONDS_PER_HOUR = 3600.0


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
            layer_step=spec.moe.layer_step,
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
        raise InvalidField(f"{where}.attention", "the model uses multi-head latent attention: no MHA/MQA/GQA what-if")
    kv_heads = {AttentionKind.mha: spec.heads, AttentionKind.mqa: 1}.get(override.kind, override.kv_heads or 0)
    if spec.heads % kv_heads:
        raise InvalidField(
            f"{where}.attention.kv_heads", f"{kv_heads} KV heads do not divide the model's {spec.heads} heads"
        )
    return model.with_kv_heads(kv_heads)


class _Topologies:
    """The collective topology of n devices of a profile (`device_topology`), made once per n. A class, not a
    closure, so that a system pickles: the service's jobs send candidates to other processes (service.jobs)."""

    def __init__(self, spec: HardwareSpec) -> None:
        self.spec = spec
        self.made: dict[int, roofline.Topology] = {}

    def __call__(self, devices: int) -> roofline.Topology:
        made = self.made.get(devices)
        if made is None:
            made = self.made[devices] = device_topology(self.spec, devices)
        return made


def topologies(spec: HardwareSpec) -> Callable[[int], roofline.Topology] | None:
    """The collective topology of n devices of the profile (`device_topology`), made
    once per n; None when the profile has no fabric at all."""
    ic = spec.interconnect
    if ic.scale_up is None and ic.host is None and ic.scale_out is None:
        return None
    return _Topologies(spec)


def inference_system(spec: HardwareSpec, ctx: EstimateContext, calibration: CalibrationUse | None) -> roofline.System:
    """The core's system of a profile with a request's options: its devices, their fabrics and power, and the
    calibration's corrector (if any); without one, the shipped prediction intervals (a calibrated run carries none:
    its ops' corrections are not the bands' residuals)."""
    power = spec.power.tdp_w if spec.power else None
    correct = calibration.corrector if calibration is not None else None
    intervals = interval_table() if correct is None else None
    return roofline.System(to_core(spec, ctx), topologies(spec), power, correct, intervals)


# How a run's interval is made (docs/model/intervals.md): every op at the same quantile of its band at once.
RUN_INTERVAL = {
    "quantiles": list(roofline.intervals.QUANTILES),
    "method": "every op at its band's lower (upper) edge together: errors that move together, as a device's bias "
    "does; collectives at the collectives' band by fabric class and message size",
    "source": "leave-one-device-out residuals of the validation per op family and regime (python -m bench.intervals)",
}


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


def prepare_run(
    body: InferenceRequest,
    model: tuple[ModelSpec, str],
    hardware: tuple[HardwareSpec, str, roofline.System, CalibrationUse | None],
    where: str = "body",
) -> Prepared:
    """A request as a core run, on its model and system (each with its name, the system with its calibration);
    `where` is the request's field path, for errors."""
    model_spec, model_name = model
    hw_spec, hw_name, system, calibration = hardware
    par = body.parallelism
    tp = par.tensor * par.pipeline
    if par.data is not None:
        data = par.data
        if body.devices is not None and body.devices != tp * data:
            raise InvalidField(
                f"{where}.devices",
                f"{body.devices} devices for tensor {par.tensor} × pipeline {par.pipeline} × data {data} = {tp * data}",
            )
    elif body.devices is not None:
        if body.devices % tp:
            raise InvalidField(
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
    run = inference_run(
        transformer(model_spec, body.attention, where),
        system,
        workload,
        roofline.Parallelism(par.tensor, par.pipeline, data, par.expert, par.micro_batches),
        body.dtypes,
        body.implementation,
    )
    return Prepared(body, run, model_spec, model_name, hw_spec, hw_name, data, where, calibration)


def inference_run(
    model: roofline.Transformer,
    system: roofline.System,
    workload: roofline.Workload,
    parallelism: roofline.Parallelism,
    dtypes: Dtypes,
    implementation: Implementation,
) -> roofline.InferenceRun:
    """A core run of a model on a system, with a request's dtypes (the KV cache's defaults to the activations') and
    implementation."""
    return roofline.InferenceRun(
        model=model,
        system=system,
        workload=workload,
        parallelism=parallelism,
        precision=roofline.Precision(
            str(dtypes.weights),
            str(dtypes.activations),
            str(dtypes.kv_cache or dtypes.activations),
            None if dtypes.attention is None else str(dtypes.attention),
            str(dtypes.fp8_scaling),
        ),
        attention=str(implementation.attention),
        fused=implementation.fused,
        decode_samples=implementation.decode_samples,
        tensor_all_reduce=str(implementation.all_reduce),
    )


def estimate_runs(prepared: Sequence[Prepared]) -> list[roofline.InferenceEstimate]:
    """Every run's ops evaluated together; a run that cannot be built is an `InvalidField` naming its field."""
    try:
        return roofline.estimate_inferences([p.run for p in prepared])
    except roofline.InferenceConfigError as err:
        where = prepared[err.index].where if err.index is not None else "body"
        raise InvalidField(f"{where}.{err.field}", err.message) from None


def _phase(phase: roofline.PhaseEstimate) -> dict[str, Any]:
    total = phase.time_s
    return {
        "time_s": total,
        "time_s_p10": phase.time_s_p10,
        "time_s_p90": phase.time_s_p90,
        "raw_time_s": phase.raw_time_s,
        "communication_time_s": sum(phase.communication_s.values()),
        "ops": [
            {
                "op": r.name, "calls_per_pass": r.calls, "flops": r.flops, "bytes": r.bytes, "time_s": r.time_s,
                "time_s_p10": r.time_s_p10, "time_s_p90": r.time_s_p90,
                "compute_time_s": r.compute_s, "memory_time_s": r.memory_s, "overhead_s": r.overhead_s,
                "bound": r.bound, "share": r.time_s / total if total > 0 else 0.0, "raw_time_s": r.raw_time_s,
                "calibration": row_calibration(r),
            }
            for r in phase.rows
        ],
    }  # fmt: skip


def _interval(est: roofline.InferenceEstimate, tokens: float) -> dict[str, float | None]:
    """The run's totals at the ops' p10 and p90 (None each without an interval table); throughput's p10 is the
    tokens over the p90 time."""
    band, step = est.total_time_s_band, est.decode_mean_step_s_band
    return {
        "prefill_time_s_p10": est.prefill.time_s_p10, "prefill_time_s_p90": est.prefill.time_s_p90,
        "time_per_output_token_s_p10": step[0] if step else None,
        "time_per_output_token_s_p90": step[1] if step else None,
        "decode_time_s_p10": est.decode.time_s_p10, "decode_time_s_p90": est.decode.time_s_p90,
        "total_time_s_p10": band[0] if band else None, "total_time_s_p90": band[1] if band else None,
        "throughput_tokens_per_s_p10": tokens / band[1] if band and band[1] > 0 else None,
        "throughput_tokens_per_s_p90": tokens / band[0] if band and band[0] > 0 else None,
    }  # fmt: skip


def render_run(p: Prepared, est: roofline.InferenceEstimate) -> dict[str, Any]:
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
        **_interval(est, est.output_tokens * p.data),
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
            "cache": cache_state(run.system.hardware),
            "attention": run.attention,
            "fused": run.fused,
            "dtypes": vars(run.precision),
            "calibration": run_summary(p.calibration, {"prefill": est.prefill.rows, "decode": est.decode.rows}),
            "interval": RUN_INTERVAL if est.total_time_s_band is not None else None,
        },
    }
