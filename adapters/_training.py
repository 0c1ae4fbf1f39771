"""Training requests → `roofline.TrainingRun`, and `roofline.TrainingEstimate` → `TrainingRead` documents."""

from __future__ import annotations

import math
from typing import Any

import roofline
from adapters._errors import InvalidField, non_finite
from adapters._inference import transformer
from schemas.hardware import HardwareSpec
from schemas.models import ModelSpec
from schemas.training import TrainingRequest


def training_run(
    body: TrainingRequest, model: ModelSpec, system: roofline.System, where: str = "body"
) -> roofline.TrainingRun:
    """The core's training step for a request; a step that cannot be built is an `InvalidField` naming its field
    and what is allowed (devices ≠ the parallelism's product, a global batch micro-batch × data does not divide,
    layers the pipeline cannot split …)."""
    par = body.parallelism
    per_replica = par.tensor * par.context * par.pipeline
    if par.data is not None:
        data = par.data
    elif body.devices is not None:
        if body.devices % per_replica:
            raise InvalidField(
                f"{where}.devices",
                f"{body.devices} devices are not whole replicas of tensor × context × pipeline = {per_replica}",
            )
        data = body.devices // per_replica
    else:
        data = 1
    core = roofline.TrainingRun(
        model=transformer(model, None, where),
        system=system,
        sequence=body.sequence,
        micro_batch=body.micro_batch,
        global_batch=body.global_batch,
        parallelism=roofline.TrainingParallelism(
            tensor=par.tensor, pipeline=par.pipeline, data=data, context=par.context, expert=par.expert,
            sequence_parallel=par.sequence_parallel, schedule=par.schedule.value, virtual_stages=par.virtual_stages,
        ),
        sharding=roofline.Sharding(body.sharding.zero, body.sharding.fsdp, body.sharding.shard_group),
        precision=roofline.TrainingPrecision(compute=body.dtypes.compute, matmul=body.dtypes.matmul),
        recompute=body.recompute.value,
        optimizer=body.optimizer.value,
        overlap=roofline.Overlap(body.overlap.data_parallel, body.overlap.fsdp_prefetch, body.overlap.tensor_parallel),
        attention=body.attention.value, gradient_buckets=body.gradient_buckets,
    )  # fmt: skip
    try:
        roofline.validate_training(core, body.devices)
    except roofline.TrainingConfigError as err:
        raise InvalidField(training_field(err.field, where), err.message) from None
    return core


def training_field(core: str, where: str = "body") -> str:
    """The request's field for a core field at fault: the core's `precision` is the request's `dtypes` (`compute`,
    `matmul`)."""
    head, _, rest = core.partition(".")
    return f"{where}.dtypes.{rest}" if head == "precision" else f"{where}.{core}"


def estimate_training(run: roofline.TrainingRun, where: str = "body") -> roofline.TrainingEstimate:
    """The core's estimate; a collective the profile's fabrics cannot carry is an `InvalidField`."""
    try:
        return roofline.estimate_training(run)
    except roofline.TrainingConfigError as err:
        raise InvalidField(training_field(err.field, where), err.message) from None


def render_training(
    est: roofline.TrainingEstimate, run: roofline.TrainingRun, model_name: str, hardware: HardwareSpec,
    hardware_name: str, tokens: float | None, price: float | None,
) -> dict[str, Any]:  # fmt: skip
    """A `TrainingRead` document (floats only: no numpy reaches the encoder); with `tokens`, the time, device-hours,
    cost (at `price` per device-hour) and energy of training on them."""
    _ = hardware
    mem = est.memory
    training = None
    if tokens is not None:
        training = {
            "tokens": tokens, "time_s": est.time_to_train_s(tokens), "device_hours": est.device_hours(tokens),
            "cost": est.cost(tokens, price) if price is not None else None, "energy_j": est.energy_j(tokens),
        }  # fmt: skip
    doc: dict[str, Any] = {
        "model": model_name, "hardware": hardware_name, "devices": est.devices, "data": run.parallelism.data,
        "micro_batches": est.micro_batches, "step_s": est.step_s, "tokens_per_s": est.tokens_per_s, "mfu": est.mfu,
        "step_s_p10": est.step_s_p10, "step_s_p90": est.step_s_p90,
        "tokens_per_s_p10": est.tokens_per_step / est.step_s_p90 if est.step_s_p90 else None,
        "tokens_per_s_p90": est.tokens_per_step / est.step_s_p10 if est.step_s_p10 else None,
        "hfu": est.hfu, "model_flops": est.model_flops, "hardware_flops": est.hardware_flops,
        "forward_s": est.forward_s, "backward_s": est.backward_s, "recompute_s": est.recompute_s,
        "optimizer_s": est.optimizer_s, "bubble_s": est.bubble_s,
        "communication_exposed_s": est.communication_exposed_s,
        "ops": [
            {"name": r.name, "kind": r.kind, "forward_s": r.forward_s, "backward_s": r.backward_s,
             "recompute_s": r.recompute_s}
            for r in est.ops
        ],
        "communication": [
            {"name": c.name, "op": c.op, "devices": c.devices, "bytes": c.bytes, "calls": c.calls, "time_s": c.time_s,
             "exposed_s": c.exposed_s}
            for c in est.communication
        ],
        "memory": {
            "weights_bytes": mem.weights_bytes, "gradients_bytes": mem.gradients_bytes,
            "optimizer_bytes": mem.optimizer_bytes, "activations_bytes": mem.activations_bytes,
            "buffers_bytes": mem.buffers_bytes, "gradient_bucket_bytes": mem.gradient_bucket_bytes,
            "gathered_bytes": mem.gathered_bytes, "total_bytes": mem.total_bytes, "capacity_bytes": mem.capacity_bytes,
            "fits": mem.fits, "max_micro_batch": est.max_micro_batch,
        },
        "training": training,
    }  # fmt: skip
    _check_finite(doc, "response")
    return doc


def _check_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise non_finite(where)
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}.{i}")
