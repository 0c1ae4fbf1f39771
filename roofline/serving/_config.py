"""What a serving simulation is made of: the engine's scheduler (`Scheduler`), the requests (`Requests`, drawn by
`roofline.serving.requests`), and the error that names the input at fault (`ServingConfigError`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

SCHEDULERS = ("static", "continuous", "chunked")
KV_POLICIES = ("reserve", "on_demand")
ROUTERS = ("round_robin", "least_loaded", "prefix_aware")


class ServingConfigError(ValueError):
    """A simulation that cannot run; `field` names the input at fault (e.g. `load.concurrency`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding: every iteration a draft proposes `draft_tokens` (k) tokens per decoding sequence, one
    after another, and the target checks them in one pass over k + 1 positions per sequence, keeping the longest
    agreeing prefix and one token of its own (Leviathan et al., ICML 2023; Chen et al., 2023). The draft is
    `draft_layers` decoder layers of the target's shapes and its LM head: DeepSeek-V3's multi-token-prediction
    module (one layer; TensorRT-LLM `decoding_type: MTP`, vLLM `method: mtp`) or an EAGLE head (one layer; Li et
    al., 2024). `accepted_tokens` (a, 0 ≤ a ≤ k) is the mean number of drafts the target keeps, as the engines
    report it (vLLM's `spec_decode` acceptance metrics, TensorRT-LLM's acceptance length − 1): it depends on the
    model, the draft and the text, so it is an input, never assumed. Each iteration moves a sequence on by 1 + a
    tokens."""

    draft_tokens: int
    accepted_tokens: float
    draft_layers: int = 1

    @property
    def rate(self) -> float:
        """Tokens a sequence gains per iteration (expected)."""
        return 1.0 + self.accepted_tokens

    @property
    def width(self) -> int:
        """Positions per sequence the target computes in one iteration."""
        return self.draft_tokens + 1


@dataclass(frozen=True)
class Lora:
    """LoRA adapters on the engine, as vLLM names its options (vllm/config/lora.py `LoRAConfig`): at most
    `max_loras` distinct adapters in the running batch, each in one of `max_loras` GPU slots preallocated at
    `max_lora_rank`; `max_cpu_loras` adapters kept in host memory (0: `max_loras`, vLLM's default). `prepare` fills
    in the costs (`roofline.serving._lora`): `slot_bytes` one slot's weights on a device, `load_s_per_rank` the
    seconds to bring one unit of rank of an adapter over the host link, `kernel` the batched LoRA kernels of one
    iteration by (distinct adapters, tokens)."""

    max_loras: int = 1
    max_cpu_loras: int = 0
    max_lora_rank: int = 16
    slot_bytes: float = 0.0
    load_s_per_rank: float = 0.0
    kernel: Callable[[float, float], float] | None = field(default=None, compare=False)

    @property
    def cpu_slots(self) -> int:
        return self.max_cpu_loras or self.max_loras


@dataclass(frozen=True)
class Scheduler:
    """How an engine forms its iterations.

    - `static`: a batch of up to `max_num_seqs` waiting requests is prefilled together and decoded until its last
      request ends; nothing joins a running batch (the pre-Orca way; the core's `estimate_inference`).
    - `continuous`: in-flight batching (Orca, Yu et al. OSDI 2022; TensorRT-LLM's in-flight batching): every
      iteration runs all decoding sequences and admits waiting prompts whole while the iteration's tokens stay within
      `max_num_batched_tokens` (TensorRT-LLM `max_num_tokens`) and the sequences within `max_num_seqs`
      (`max_batch_size`).
    - `chunked`: decode first, then prefill chunks fill the rest of the token budget (Sarathi-Serve, Agrawal et al.
      OSDI 2024; vLLM's `max_num_batched_tokens` with chunked prefill, its V1 default).

    KV cache: a pool of `kv_blocks` blocks of `block_size` tokens (vLLM's PagedAttention, Kwon et al. SOSP 2023).
    `reserve` admits a request only when blocks for its prompt and whole output are free and never preempts
    (TensorRT-LLM's GUARANTEED_NO_EVICT default); `on_demand` allocates as tokens are written and, when the pool runs
    out, preempts the most recently admitted request, which recomputes its tokens when readmitted (vLLM's
    recompute preemption). `iteration_overhead_s`: the engine's own per-iteration host time (scheduling,
    sampling) not hidden behind the GPU; `cuda_graphs`: pure-decode iterations are CUDA-graph replays, each kernel at
    the graph's fixed cost (`roofline._kernels.KERNEL_FLOOR_S`), while iterations with prefill run eagerly; False: every
    iteration is eager and takes at least its kernels' launches; `speculation`: speculative decoding (`Speculation`;
    None: one token per sequence per iteration)."""

    kind: str = "chunked"
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_blocks: int = 0  # 0: sized from memory by the caller
    block_size: int = 32
    kv_policy: str = "reserve"
    cuda_graphs: bool = True
    iteration_overhead_s: float = 0.0
    speculation: Speculation | None = None
    # Prefix caching (`roofline.serving._prefix`): blocks named by their prefix stay cached after their request ends
    # (vLLM --enable-prefix-caching, SGLang's radix cache, TensorRT-LLM enable_block_reuse); `host_cache_bytes` of
    # host memory per device behind them, reached over a host link of `host_link_bytes_per_s` per direction
    # (`prepare` turns them into `host_cache_blocks` engine blocks and `host_s_per_token`, a token's KV per device
    # over the link); `router`: how requests are spread over the replicas (`ROUTERS`), `router_threshold` the load
    # difference past which `prefix_aware` sends a request to the least loaded replica instead.
    prefix_caching: bool = False
    host_cache_bytes: float = 0.0
    host_link_bytes_per_s: float = 0.0
    host_cache_blocks: int = 0
    host_s_per_token: float = 0.0
    router: str = "round_robin"
    router_threshold: int = 32
    # LoRA adapters (`Lora`; None: the base model only). Applies to requests that name an adapter.
    lora: Lora | None = None


@dataclass(frozen=True)
class Requests:
    """The requests of a run. Closed loop (`concurrency` > 0): that many clients each send a request as soon as
    their previous one ends, `prompt`/`output` in order; open loop: `arrival_s` gives each request's arrival.

    Sharing: `hashes[hash_starts[i]:hash_starts[i + 1]]` is request i's chain of block hashes, one per full block
    of `hash_block` tokens of its prompt and, optionally, of its output (a later turn of its session reuses them),
    each naming its block and every block before it. Sessions: request i is sent `think_s[i]` after request
    `after[i]` ends, never before its own arrival (`after[i]` −1: at its arrival; open loops only). LoRA:
    request i runs adapter `adapter[i]` (−1: none) of rank `adapter_rank`."""

    prompt: IntArray
    output: IntArray
    arrival_s: FloatArray | None = None
    concurrency: int = 0
    hashes: IntArray | None = None
    hash_starts: IntArray | None = None
    hash_block: int = 0
    after: IntArray | None = None
    think_s: FloatArray | None = None
    # LoRA: each request's adapter (−1: the base model) and the adapters' rank
    adapter: IntArray | None = None
    adapter_rank: int = 0

    @property
    def count(self) -> int:
        return int(self.prompt.size)
