"""The engines of a deployment (`EngineSpec`) prepared for simulation (`prepare`): surfaces built, KV pools sized,
the KV transfer of a disaggregated deployment costed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from roofline._kernels import KERNEL_FLOOR_S
from roofline.collectives import collective
from roofline.inference import InferenceRun, Parallelism, kv_bytes_per_sequence, weights_per_device
from roofline.inference._memory import activation_bytes_per_sequence
from roofline.serving import _lora
from roofline.serving._config import KV_POLICIES, SCHEDULERS, Lora, Requests, Scheduler, ServingConfigError
from roofline.serving._simulator import Pool
from roofline.serving._surface import IterationSurface
from roofline.serving._surface_build import build_surface

SurfaceBuilder = Callable[[InferenceRun, int, int, int, float | None], IterationSurface]


@dataclass(frozen=True)
class EngineSpec:
    """`replicas` engines each on `run.parallelism`'s tensor × pipeline devices (a pipeline of p stages runs p
    micro-batches in flight: p virtual engines, vLLM's `virtual_engine`, each iterating over all stages);
    `memory_fraction` of device memory the engine may use (vLLM `gpu_memory_utilization`, 0.9)."""

    run: InferenceRun
    scheduler: Scheduler
    replicas: int = 1
    memory_fraction: float = 0.9

    @property
    def devices(self) -> int:
        par = self.run.parallelism
        return self.replicas * par.tensor * par.pipeline * par.data


@dataclass(frozen=True)
class ServingRun:
    """Engines prepared for simulation: the surfaces built, the KV pools sized."""

    front: Pool
    back: Pool | None
    transfer_s: float | None  # per prompt token of KV moved from prefill to decode (None: aggregated)
    devices: int
    kv_blocks: tuple[int, ...]
    surface_error: float


@dataclass(frozen=True)
class PoolMemory:
    """One device of an engine: `capacity` bytes, `model` bytes of weights and a full token budget's activations
    (and the LoRA slots', `lora`), and the KV pool's bytes (`memory_fraction` × capacity − model)."""

    capacity: float
    model: float
    pool: float
    lora: float = 0.0


def draft_share(spec: EngineSpec) -> float:
    """A speculative draft's decoder layers over the target's: the extra weights and KV cache it holds (DeepSeek-V3's
    MTP module is one more decoder layer with its own cache; it shares the embedding and LM head)."""
    draft = spec.scheduler.speculation
    return 0.0 if draft is None else draft.draft_layers / spec.run.model.layers


def pool_memory(spec: EngineSpec) -> PoolMemory:
    run, sched = spec.run, spec.scheduler
    m, par, prec = run.model, run.parallelism, run.precision
    capacity = run.system.hardware.memory_capacity_bytes
    act = activation_bytes_per_sequence(m, par, prec, float(sched.max_num_batched_tokens), False)
    # LoRA: `max_loras` slots at `max_lora_rank`, allocated before the KV cache is sized (`roofline.serving._lora`)
    lora = 0.0 if sched.lora is None else sched.lora.max_loras * _lora.adapter_bytes(run, sched.lora.max_lora_rank)
    model = weights_per_device(m, par, prec) * (1.0 + draft_share(spec)) + act + lora
    return PoolMemory(capacity, model, spec.memory_fraction * capacity - model, lora)


def _kv_per_token(spec: EngineSpec, max_context: int) -> float:
    """KV bytes one device holds per token (the busiest pipeline stage's layers, as the core counts them)."""
    run = spec.run
    per_token = kv_bytes_per_sequence(run.model, run.parallelism, run.precision, float(max_context)) / max_context
    return per_token * (1.0 + draft_share(spec))


def host_blocks(spec: EngineSpec, max_context: int) -> int:
    """Engine blocks the host tier holds: `host_cache_bytes` per device over a block's KV on a device."""
    return math.floor(spec.scheduler.host_cache_bytes / (_kv_per_token(spec, max_context) * spec.scheduler.block_size))


def kv_pool_blocks(spec: EngineSpec, max_context: int) -> int:
    """Blocks of the paged KV pool on one device: memory the engine may use, less the weights and the activations of
    a full token budget, over one block's KV (the busiest pipeline stage's layers, as the core counts them)."""
    per_token = _kv_per_token(spec, max_context)
    return max(0, math.floor(pool_memory(spec).pool / (per_token * spec.scheduler.block_size)))


def _pool(
    spec: EngineSpec, requests: Requests, field: str, decode_only: bool = False, build: SurfaceBuilder = build_surface
) -> tuple[Pool, int, float]:
    sched = spec.scheduler
    draft = sched.speculation
    if draft is not None:
        if draft.draft_tokens < 1:
            raise ServingConfigError(f"{field}.speculative.draft_tokens", "at least 1 draft token per iteration")
        if not 0.0 <= draft.accepted_tokens <= draft.draft_tokens:
            raise ServingConfigError(
                f"{field}.speculative.accepted_tokens",
                f"between 0 and draft_tokens ({draft.draft_tokens}): the mean number of drafts the target keeps",
            )
        if draft.draft_layers < 1:
            raise ServingConfigError(f"{field}.speculative.draft_layers", "at least 1 decoder layer")
    if sched.lora is not None and requests.adapter is None:
        sched = replace(sched, lora=None)  # no request names an adapter: the base model alone
        spec = replace(spec, scheduler=sched)
    p = spec.run.parallelism.pipeline
    longest = int((requests.prompt + requests.output).max())
    blocks = sched.kv_blocks or kv_pool_blocks(spec, longest)
    per_engine = blocks // p
    need = -(-longest // sched.block_size)
    if per_engine < need:
        raise ServingConfigError(
            f"{field}.memory_fraction",
            f"the KV pool holds {per_engine * sched.block_size} tokens per engine, not one request of {longest}: "
            "more devices, a narrower KV dtype or a larger memory fraction",
        )
    if sched.kind in ("continuous", "static") and not decode_only:
        widest = int(requests.prompt.max())
        if sched.kind == "continuous" and widest > sched.max_num_batched_tokens:
            raise ServingConfigError(
                f"{field}.max_num_batched_tokens",
                f"{sched.max_num_batched_tokens} is below the longest prompt ({widest}); without chunked prefill a "
                "prompt runs whole",
            )
    tokens = sched.max_num_batched_tokens
    if sched.kind == "static":
        tokens = sched.max_num_seqs * int(requests.prompt.max())
    if sched.speculation is not None:  # a verification pass: k + 1 positions per decoding sequence
        tokens = max(tokens, sched.max_num_seqs * sched.speculation.width)
    # The engines replay their decode batches as CUDA graphs (TensorRT-LLM's `cuda_graph_config`, SGLang's
    # `cuda_graph_max_bs`, vLLM V1's captured sizes), a kernel there costing the graph floor, and run iterations with
    # prefill chunks eagerly, at the profile's launch cost.
    graph = KERNEL_FLOOR_S if sched.cuda_graphs and sched.kind != "static" else None
    surface = build(spec.run, max(tokens, 1), sched.max_num_seqs, longest, graph)
    scheduler = replace(sched, kv_blocks=per_engine)
    if sched.host_cache_bytes > 0 and not decode_only:
        if sched.host_link_bytes_per_s <= 0:
            raise ServingConfigError(
                f"{field}.host_cache_bytes",
                f"{spec.run.system.hardware.name} has no host link to bring cached blocks back over",
            )
        # each device keeps its own share of a block's KV in host memory and moves it over its own link
        per_token = _kv_per_token(spec, longest)
        scheduler = replace(scheduler, host_cache_blocks=host_blocks(spec, longest),
                            host_s_per_token=per_token / sched.host_link_bytes_per_s)  # fmt: skip
    hw = spec.run.system.hardware
    if sched.lora is not None:
        scheduler = replace(scheduler, lora=_lora_costs(spec, requests, field, tokens, graph or hw.launch_s))
    engines = spec.replicas * p * spec.run.parallelism.data  # attention data-parallel ranks schedule on their own
    return Pool(surface, scheduler, engines, hw.launch_s), per_engine, surface.error


def _lora_costs(spec: EngineSpec, requests: Requests, field: str, tokens: int, launch_s: float) -> Lora:
    """The LoRA options with their costs: a slot's bytes, a load's seconds per unit of rank over the host link,
    the kernels' surface."""
    lora, run = spec.scheduler.lora, spec.run
    assert lora is not None
    _lora.check(run.model, lora, requests.adapter_rank, f"{field}")
    if requests.adapter_rank > lora.max_lora_rank:
        raise ServingConfigError("load.adapters.rank", f"{requests.adapter_rank} is above the engine's "
                                 f"max_lora_rank ({lora.max_lora_rank}): vLLM refuses such an adapter")  # fmt: skip
    if spec.scheduler.host_link_bytes_per_s <= 0:
        raise ServingConfigError("load.adapters", f"{run.system.hardware.name} has no host link to load adapters over")
    per_rank = _lora.adapter_bytes(run, 1) / spec.scheduler.host_link_bytes_per_s
    kernel = _lora.kernel_surface(run, lora, tokens, launch_s)
    return replace(lora, slot_bytes=_lora.adapter_bytes(run, lora.max_lora_rank), load_s_per_rank=per_rank,
                   kernel=kernel)  # fmt: skip


def prepare(front: EngineSpec, requests: Requests, back: EngineSpec | None = None,
            transfer_free: bool = False, build: SurfaceBuilder = build_surface) -> ServingRun:  # fmt: skip
    """Build the engines' surfaces and pools for `requests`; `back` the decode workers when disaggregated. `build`
    makes a surface for (run, tokens, sequences, context): a planner passes one that shares surfaces."""
    if front.scheduler.kind not in SCHEDULERS:
        raise ServingConfigError("scheduler.kind", f"one of {', '.join(SCHEDULERS)}")
    if front.scheduler.kv_policy not in KV_POLICIES:
        raise ServingConfigError("scheduler.kv_policy", f"one of {', '.join(KV_POLICIES)}")
    pool, blocks, error = _pool(front, requests, "prefill.engine" if back else "engine", build=build)
    if back is None:
        return ServingRun(pool, None, None, front.devices, (blocks,), error)
    back_pool, back_blocks, back_error = _pool(back, requests, "decode.engine", decode_only=True, build=build)
    per_token = 0.0 if transfer_free else _transfer_per_token(front, back, requests)
    return ServingRun(pool, back_pool, per_token, front.devices + back.devices, (blocks, back_blocks),
                      max(error, back_error))  # fmt: skip


def _transfer_per_token(front: EngineSpec, back: EngineSpec, requests: Requests) -> float:
    """Seconds per prompt token to move a request's KV cache from its prefill worker to its decode worker: the
    whole cache (every layer, unsplit) over min(prefill, decode) devices sending in parallel, each a point-to-point
    send on the profile's fabric among the two workers' devices (`roofline.collectives`, DistServe §4.3)."""
    run = front.run
    m, prec = run.model, run.precision
    mean_prompt = float(requests.prompt.mean())
    whole = kv_bytes_per_sequence(m, Parallelism(), prec, mean_prompt)
    fp, bp = front.run.parallelism, back.run.parallelism
    links = min(fp.tensor * fp.pipeline, bp.tensor * bp.pipeline)
    span = fp.tensor * fp.pipeline + bp.tensor * bp.pipeline
    topology = run.system.topology
    if topology is None:
        raise ServingConfigError("hardware", f"{run.system.hardware.name} has no fabric to move the KV cache over")
    fabric = None
    for devices in range(span, 2 * span + 72):  # the smallest whole set of nodes holding both workers
        try:
            fabric = topology(devices)
            break
        except ValueError:
            continue
    if fabric is None:
        raise ServingConfigError("decode.parallelism", f"no fabric joins {span} devices of the two workers")
    seconds = float(collective("send_recv", whole / links, fabric).time_s)
    return seconds / mean_prompt


def transfer_function(ready: ServingRun) -> Callable[[int], float] | None:
    """Seconds to move a prompt's KV cache from prefill to decode (None when aggregated)."""
    per_token = ready.transfer_s
    return (lambda prompt: per_token * prompt) if per_token is not None else None
