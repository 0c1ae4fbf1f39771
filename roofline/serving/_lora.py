"""LoRA adapters on one base model, as vLLM serves them (`--enable-lora`; Hu et al., "LoRA", ICLR 2022): what the
adapters' GPU slots take from the KV pool, what the batched LoRA kernels add to an iteration, what loading an
adapter costs, and the engine's adapter state (slots, host cache, the running batch's set).

- Adapted layers: every linear layer of a decoder layer, vLLM's default (`LoRAConfig.target_modules` None: "all
  supported LoRA modules", vllm/config/lora.py; vllm/lora/utils.py:245 `get_supported_lora_modules`, "all linear
  layers"): the attention's q, k, v and o projections and the MLP's gate, up and down (PEFT's names). A
  mixture-of-experts layer's experts are not adapted here (attention only).
- GPU slots: each adapted layer preallocates `max_loras` slots of A (rank × d_in) and B (d_out × rank) at
  `max_lora_rank`, in the model's dtype (vllm/lora/layers/base_linear.py:104-154 `create_lora_weights`); a column-
  parallel layer (q, k, v, gate, up) keeps A whole and B's rows split over the tensor ranks
  (column_parallel_linear.py:99 `output_size_per_partition`), a row-parallel one (o, down) A's columns split and B
  whole (row_parallel_linear.py:27). They are allocated before the KV cache is sized, so they come out of it.
- Kernels: Punica's SGMV/BGMV (Chen et al., MLSys 2024; S-LoRA, Sheng et al., MLSys 2024), vLLM's `lora_shrink`
  then `lora_expand` per adapted layer, each over all the layer's slices (vllm/lora/punica_wrapper/punica_gpu.py:91
  `add_shrink`, :124 `add_expand`, :206 `add_lora_linear`): x · A (tokens × d_in × rank), then · B (tokens × rank ×
  d_out), the tokens grouped by adapter; the kernels run over the slots' width, `max_lora_rank`. Costed through the
  op core as the narrow products they are (`roofline.ops.matmul`, batch = distinct adapters, each group of tokens /
  adapters rows).
- Slots and host cache: an adapter not in a GPU slot is activated into the least recently used slot
  (vllm/lora/model_manager.py:1441-1453 `activate_adapter`, `_active_adapters.remove_oldest()`), from the host-memory
  LRU cache of `max_cpu_loras` adapters (model_manager.py:1393-1400, worker_manager.py:309-313
  `remove_oldest_adapter`), read from storage into it on a miss. A load moves the adapter's own weights (its rank)
  over the device's host link; a miss is costed as a host load too (storage is slower: a lower bound).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from roofline._hardware import dtype_bytes
from roofline._kernels import single
from roofline.inference import InferenceRun, Transformer
from roofline.ops import matmul
from roofline.serving._config import Lora, ServingConfigError
from roofline.serving._surface import _Grid2
from roofline.serving._surface_build import token_grid

# vLLM's MaxLoRARanks (vllm/config/lora.py:27)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def layers_of(model: Transformer, tensor: int = 1) -> list[tuple[float, tuple[float, ...]]]:
    """The adapted layers of a decoder layer on one device, as vLLM packs them (qkv, o, gate_up, down): each layer's
    d_in and its slices' d_out (q, k, v; gate, up; a model without a gate has up alone). Column-parallel layers
    (qkv, gate_up) keep d_in and split d_out over `tensor`, row-parallel ones (o, down) split d_in."""
    h, q, kv = float(model.hidden), float(model.heads * model.head_dim), float(model.kv_heads * model.head_dim)
    t = float(tensor)
    out: list[tuple[float, tuple[float, ...]]] = [(h, (q / t, kv / t, kv / t)), (q / t, (h,))]
    if model.moe is None:
        f = float(model.ffn)
        out += [(h, (f / t,) * (2 if model.gated else 1)), (f / t, (h,))]
    return out


def _per_rank(model: Transformer, tensor: int = 1) -> float:
    """Σ (d_in + d_out) over the adapted projections (each slice its own A of rank × d_in and B of d_out × rank)."""
    return sum(len(outs) * d_in + sum(outs) for d_in, outs in layers_of(model, tensor))


def stage_layers(run: InferenceRun) -> int:
    """Decoder layers on the busiest pipeline stage."""
    return -(-run.model.layers // run.parallelism.pipeline)


def lora_dtype(run: InferenceRun) -> str:
    """The adapters' dtype: vLLM's `lora_dtype` "auto" is the model's dtype (vllm/config/lora.py
    `verify_with_model_config`), the activations' type, 16-bit under narrower weights or activations (fp8 or fp4
    checkpoints keep a 16-bit model dtype)."""
    dtype = run.precision.activations
    return dtype if dtype_bytes(dtype) >= 2 else "bf16"


def adapter_bytes(run: InferenceRun, rank: int) -> float:
    """Bytes of one adapter of `rank` on one device: rank × (d_in + d_out) per adapted layer, per layer of the
    busiest stage, in `lora_dtype`."""
    size = dtype_bytes(lora_dtype(run))
    return rank * _per_rank(run.model, run.parallelism.tensor) * stage_layers(run) * size


def flops_per_token(model: Transformer, rank: int) -> float:
    """FLOPs of the LoRA kernels per token over the whole model: shrink and expand, 2·rank·(d_in + d_out) per
    adapted layer, per layer."""
    return 2.0 * rank * _per_rank(model) * model.layers


def check(model: Transformer, lora: Lora, rank: int, field: str) -> None:
    if model.mla is not None:
        raise ServingConfigError(field, "LoRA adapters on a model with multi-head latent attention are not modelled")
    if lora.max_loras < 1:
        raise ServingConfigError(f"{field}.max_loras", "at least 1 adapter per batch")
    if lora.max_lora_rank not in LORA_RANKS:
        raise ServingConfigError(f"{field}.max_lora_rank", f"one of vLLM's {', '.join(map(str, LORA_RANKS))}")
    if lora.max_cpu_loras and lora.max_cpu_loras < lora.max_loras:
        raise ServingConfigError(f"{field}.max_cpu_loras", f"at least max_loras ({lora.max_loras}), as vLLM requires")


def kernel_surface(run: InferenceRun, lora: Lora, max_tokens: int, launch_s: float) -> _Grid2:
    """Seconds of an iteration's LoRA kernels by (distinct adapters, tokens): per adapted layer of the busiest
    stage, vLLM's `add_lora_linear` (punica_gpu.py:206-270): one shrink over all its slices (tokens × d_in × slices·R,
    into an fp32 buffer) and one expand (tokens × R × Σ d_out, added into the layer's output: a residual epilogue)
    at R = `max_lora_rank`, the tokens in one group per adapter (`roofline.ops.matmul` with that batch)."""
    hw = run.system.hardware
    dtype = lora_dtype(run)
    adapters = sorted({1, *(int(a) for a in np.unique(np.geomspace(1, lora.max_loras, 8).round())), lora.max_loras})
    tokens = [float(t) for t in token_grid(max(max_tokens, 2))]
    a = np.array(adapters, dtype=np.float64)[:, None]
    n = np.array(tokens, dtype=np.float64)[None, :]
    groups = np.minimum(a, n)
    rows = np.ceil(n / groups)
    r = float(lora.max_lora_rank)
    total = np.zeros((a.size, n.size))
    for d_in, outs in layers_of(run.model, run.parallelism.tensor):
        shrink = matmul(hw, rows, len(outs) * r, d_in, groups, dtype, out_dtype="fp32")
        expand = matmul(hw, rows, sum(outs), r, groups, dtype, epilogue=("residual",))
        seconds = single([*shrink, *expand], hw, hw.vector_peak("fp32"), launch_s).time_s
        total = total + np.broadcast_to(seconds, total.shape)
    total = total * stage_layers(run)
    return _Grid2([float(x) for x in adapters], tokens, total.tolist())


@dataclass
class LoraStats:
    """One engine's adapters over the run: adapters activated into a GPU slot (`loads`), of which read from
    storage (`host_misses`: not in the host cache), the seconds those loads took, requests that waited because the
    batch held `max_loras` other adapters (each counted once), and the most distinct adapters of any iteration."""

    loads: int = 0
    host_misses: int = 0
    load_s: float = 0.0
    delayed: int = 0
    max_active: int = 0


class Adapters:
    """An engine's adapter state: the running batch's adapters (with their requests' counts), the GPU slots and the
    host cache (least recently used first)."""

    def __init__(self, lora: Lora, rank: int) -> None:
        self.lora, self.rank = lora, rank
        self.active: dict[int, int] = {}
        self.slots: OrderedDict[int, None] = OrderedDict()
        self.host: OrderedDict[int, None] = OrderedDict()
        self.stats = LoraStats()
        self.pending_s = 0.0  # loads to run before the next iteration's forward pass
        self.waited: set[int] = set()
        self.version = 0  # counts adapters leaving the running batch (a skipped request may fit after one)
        self.skipped: deque[int] = deque()  # waiting requests skipped by `max_loras`, ahead of the queue
        self.skipped_version = 0

    def fits(self, adapter: int) -> bool:
        """vLLM's rule (vllm/v1/core/sched/scheduler.py:1091-1101): a request is scheduled only when its adapter is
        in the running batch's set or the set holds fewer than `max_loras`; else it is skipped this step."""
        return adapter < 0 or adapter in self.active or len(self.active) < self.lora.max_loras

    def fits_or_hold(self, waiting: deque[int], adapter: int) -> bool:
        """Whether the head of `waiting` (of `adapter`) fits; if not, it is held back in `skipped` (vLLM skips it
        and looks at the next waiting request)."""
        if self.fits(adapter):
            return True
        rid = waiting.popleft()
        if rid not in self.waited:
            self.waited.add(rid)
            self.stats.delayed += 1
        self.skipped.append(rid)
        return False

    def release_held(self, waiting: deque[int]) -> None:
        """Requests held back stay skipped, without being looked at again, until an adapter leaves the batch; then
        they return to the head of `waiting`, in their order."""
        if self.skipped and self.version != self.skipped_version:
            waiting.extendleft(reversed(self.skipped))
            self.skipped.clear()
        self.skipped_version = self.version

    def join(self, adapter: int) -> None:
        """A request of `adapter` joins the batch: the host cache is touched (vLLM touches it on every request,
        worker_manager.py:288-327 `add_adapter`), a miss read from storage into it, evicting its least recently used
        adapter and that adapter's GPU slot with it (`AdapterLRUCache` deactivates what it drops,
        model_manager.py:65-73); an adapter not in a GPU slot is loaded into the least recently used slot no running
        request uses."""
        if adapter < 0:
            return
        if adapter in self.host:
            self.host.move_to_end(adapter)
        else:
            self.stats.host_misses += 1
            self.host[adapter] = None
            if len(self.host) > self.lora.cpu_slots:
                for old in self.host:
                    if old not in self.active:
                        del self.host[old]
                        self.slots.pop(old, None)
                        break
        if adapter in self.active:
            self.active[adapter] += 1
            return
        self.active[adapter] = 1
        self.stats.max_active = max(self.stats.max_active, len(self.active))
        if adapter in self.slots:
            self.slots.move_to_end(adapter)
            return
        if len(self.slots) >= self.lora.max_loras:
            for old in self.slots:
                if old not in self.active:
                    del self.slots[old]
                    break
        self.slots[adapter] = None
        seconds = self.rank * self.lora.load_s_per_rank
        self.stats.loads += 1
        self.stats.load_s += seconds
        self.pending_s += seconds

    def leave(self, adapter: int) -> None:
        if adapter < 0:
            return
        left = self.active[adapter] - 1
        if left:
            self.active[adapter] = left
        else:
            del self.active[adapter]
            self.slots.move_to_end(adapter)  # last used now
            self.version += 1

    def kernel_s(self, tokens: float) -> float:
        """The LoRA kernels of an iteration of `tokens` with the running batch's adapters."""
        kernel = self.lora.kernel
        return kernel(float(len(self.active)), tokens) if kernel is not None and self.active else 0.0

    def loads_s(self) -> float:
        seconds, self.pending_s = self.pending_s, 0.0
        return seconds
