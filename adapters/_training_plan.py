"""Training plan requests → `roofline.plan_training`, and its `TrainingPlan` → a `TrainingPlanRead` document."""

from __future__ import annotations

from typing import Any

import roofline
from adapters._errors import InvalidField
from adapters._inference import transformer
from adapters._training import render_training, training_field
from schemas.hardware import HardwareSpec
from schemas.models import ModelSpec
from schemas.training_plan import TrainingPlanRequest


def plan_space(body: TrainingPlanRequest) -> roofline.PlanSpace:
    s = body.search
    return roofline.PlanSpace(
        tensor=tuple(s.tensor), sequence_parallel=tuple(s.sequence_parallel), pipeline=tuple(s.pipeline),
        schedules=tuple(x.value for x in s.schedule), virtual_stages=tuple(s.virtual_stages), context=tuple(s.context),
        sharding=tuple(roofline.Sharding(x.zero, x.fsdp, x.shard_group) for x in s.sharding),
        micro_batch=tuple(s.micro_batch), recompute=tuple(x.value for x in s.recompute),
    )  # fmt: skip


def plan_training(
    body: TrainingPlanRequest, model: ModelSpec, system: roofline.System, should_stop: roofline.StopCheck | None = None
) -> roofline.TrainingPlan:
    """Search the request's space (until `should_stop` answers true: the rest is `unfinished`). A search in which
    no configuration can be built is an `InvalidField`: naming
    `body.devices` when some device count is not whole replicas of any layout, else the input most often at fault."""
    base = roofline.TrainingRun(
        model=transformer(model, None, "body"), system=system, sequence=body.sequence,
        micro_batch=body.search.micro_batch[0], global_batch=body.global_batch,
        precision=roofline.TrainingPrecision(compute=body.dtypes.compute, matmul=body.dtypes.matmul),
        optimizer=body.optimizer.value,
        overlap=roofline.Overlap(body.overlap.data_parallel, body.overlap.fsdp_prefetch, body.overlap.tensor_parallel),
        attention=body.attention.value, gradient_buckets=body.gradient_buckets,
    )  # fmt: skip
    plan = roofline.plan_training(base, body.device_counts(), plan_space(body), body.max_results, body.rank_by.value,
                                  should_stop or (lambda: False))  # fmt: skip
    if plan.invalid == plan.searched and not plan.unfinished:
        fields = plan.invalid_fields
        field = "devices" if "devices" in fields else max(fields, key=lambda f: fields[f], default="search")
        shown = "; ".join(f"{request_field(k)}: {v} ({fields[k]} configurations)" for k, v in plan.reasons.items())
        raise InvalidField(
            request_field(field),
            f"none of the {plan.searched} configurations searched can be built on these devices: {shown or 'none'}",
        )
    return plan


def request_field(core: str) -> str:
    """The request's field for a core field at fault: the layout's degrees are the search's axes."""
    head, _, rest = core.partition(".")
    if head == "parallelism":
        return "body.devices" if rest in ("", "data") else f"body.search.{rest}"
    if head in ("sharding", "micro_batch", "recompute"):
        return f"body.search.{head}"
    return training_field(core)


def render_training_plan(
    body: TrainingPlanRequest, plan: roofline.TrainingPlan, model_name: str, hardware: HardwareSpec,
    hardware_name: str,
) -> dict[str, Any]:  # fmt: skip
    """A `TrainingPlanRead` document (floats only)."""
    tokens, price = body.train_tokens, body.price_per_device_hour
    configurations = []
    for rank, entry in enumerate(plan.ranked, start=1):
        run, est = entry.run, entry.estimate
        par, sh = run.parallelism, run.sharding
        estimate = render_training(est, run, model_name, hardware, hardware_name, tokens, price)
        configurations.append({
            "rank": rank,
            "layout": {
                "devices": par.devices, "data": par.data, "tensor": par.tensor,
                "sequence_parallel": par.sequence_parallel, "pipeline": par.pipeline, "schedule": par.schedule,
                "virtual_stages": par.virtual_stages, "context": par.context,
                "sharding": {"zero": sh.zero, "fsdp": sh.fsdp, "shard_group": sh.shard_group},
                "micro_batch": run.micro_batch, "micro_batches": run.micro_batches, "recompute": run.recompute,
            },
            "step_s": est.step_s, "tokens_per_s": est.tokens_per_s, "mfu": est.mfu,
            "memory_per_device_bytes": est.memory.total_bytes, "capacity_bytes": est.memory.capacity_bytes,
            "training": estimate["training"], "estimate": estimate,
        })  # fmt: skip
    return {
        "model": model_name, "hardware": hardware_name, "ranked_by": body.rank_by.value,
        "configurations": configurations, "searched": plan.searched, "invalid": plan.invalid,
        "pruned_for_memory": plan.pruned_memory, "evaluated": plan.evaluated,
        "invalid_by_field": dict(plan.invalid_fields), "reasons": dict(plan.reasons),
        "smallest_pruned_memory_bytes": plan.smallest_memory_bytes,
        "unfinished": plan.unfinished, "partial": plan.unfinished > 0,
    }  # fmt: skip
