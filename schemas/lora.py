"""LoRA adapters (issue 41): the engine's options as vLLM names them, a load's adapters and their popularity
(`schemas.serving.Load`), and what the adapters did in a serving estimate."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from schemas import limits
from schemas.common import InputModel
from schemas.sharing import Popularity


class LoraEngineOptions(InputModel):
    """The engine's LoRA options (vLLM --max-loras, --max-cpu-loras, --max-lora-rank; vllm/config/lora.py). They
    apply when the load's requests name adapters (`load.adapters`, or a trace's `adapter` column)."""

    max_loras: Annotated[int, Field(ge=1, le=limits.MAX_LORAS)] = Field(
        default=1,
        description="Distinct adapters in one batch, each in a GPU slot preallocated at max_lora_rank, taken from the "
        "KV pool (vLLM --max-loras, default 1). A request whose adapter is not in the running batch waits while "
        "the batch holds max_loras others.",
    )
    max_cpu_loras: Annotated[int, Field(ge=1, le=limits.MAX_LORAS)] | None = Field(
        default=None,
        description="Adapters kept in host memory, least recently used evicted (vLLM --max-cpu-loras; null: "
        "max_loras); at least max_loras.",
    )
    max_lora_rank: Annotated[int, Field(ge=1, le=512)] = Field(
        default=16,
        description="The slots' rank (vLLM --max-lora-rank: 1, 8, 16, 32, 64, 128, 256, 320 or 512; default 16): "
        "no adapter may have more; the LoRA kernels run at this width.",
    )


class AdapterLoad(InputModel):
    """`count` LoRA adapters of one `rank`, each request running one, drawn with a popularity: uniform, or Zipf
    (adapter k chosen ∝ k^−zipf_exponent)."""

    count: Annotated[int, Field(ge=1, le=limits.MAX_LORA_ADAPTERS)]
    rank: Annotated[int, Field(ge=1, le=512)] = 16
    popularity: Popularity = Popularity.uniform
    zipf_exponent: Annotated[float, Field(gt=0, le=10)] = 1.0


class LoraRead(BaseModel):
    """What the adapters did over the run, over every engine that serves them."""

    adapters: int = Field(description="Distinct adapters the requests named.")
    rank: int = Field(description="Their rank (a trace's adapters: the engine's max_lora_rank).")
    loads: int = Field(description="Adapters activated into a GPU slot (each load crosses the host link).")
    host_misses: int = Field(description="Of which not in the host cache (max_cpu_loras): read from storage.")
    load_s: float = Field(description="Seconds the loads took over the host link, in all.")
    delayed_requests: int = Field(
        description="Requests that waited at least once because the batch held max_loras other adapters."
    )
    max_adapters_per_iteration: int = Field(description="The most distinct adapters of any iteration.")
    memory_bytes_per_device: float = Field(
        description="Device memory the max_loras slots hold (taken from the KV pool), per device."
    )
