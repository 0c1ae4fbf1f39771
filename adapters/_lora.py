"""What LoRA adapters did in a serving estimate (issue 41), as `schemas.lora.LoraRead`'s fields."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters._errors import InvalidField
from roofline.serving import LORA_RANKS, LoraStats, Requests, ServingRun
from schemas.serving import EngineOptions


def lora_read(stats: list[LoraStats] | None, requests: Requests, ready: ServingRun) -> dict[str, Any] | None:
    """The engines' adapter counts summed (None when no request names an adapter)."""
    if stats is None or requests.adapter is None:
        return None
    lora = ready.front.scheduler.lora
    memory = lora.max_loras * lora.slot_bytes if lora is not None else 0.0
    named = requests.adapter[requests.adapter >= 0]
    return {
        "adapters": int(np.unique(named).size),
        "rank": requests.adapter_rank,
        "loads": sum(s.loads for s in stats),
        "host_misses": sum(s.host_misses for s in stats),
        "load_s": float(sum(s.load_s for s in stats)),
        "delayed_requests": sum(s.delayed for s in stats),
        "max_adapters_per_iteration": max(s.max_active for s in stats),
        "memory_bytes_per_device": float(memory),
    }


def check_lora(engine: EngineOptions, rank: int, field: str) -> None:
    """The planner's LoRA options against its traffic's adapters (`field`: where the adapters' rank was given), as
    the core checks a serving estimate's: `InvalidField` naming the field at fault."""
    if engine.max_lora_rank not in LORA_RANKS:
        raise InvalidField("body.engine.max_lora_rank", f"one of vLLM's {', '.join(map(str, LORA_RANKS))}")
    if engine.max_cpu_loras is not None and engine.max_cpu_loras < engine.max_loras:
        raise InvalidField("body.engine.max_cpu_loras", f"at least max_loras ({engine.max_loras}), as vLLM requires")
    if rank > engine.max_lora_rank:
        raise InvalidField(field, f"{rank} is above the engine's max_lora_rank ({engine.max_lora_rank}): vLLM refuses "
                           "such an adapter")  # fmt: skip
