"""What LoRA adapters did in a serving estimate (issue 41), as `schemas.lora.LoraRead`'s fields."""

from __future__ import annotations

from typing import Any

import numpy as np

from roofline.serving import LoraStats, Requests, ServingRun


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
