"""The tiles and key splits flash-attention libraries pick for themselves: Hopper's warp-specialised prefill kernels
and FlashAttention-2's forward and split-key kernels (`roofline.ops._flash` schedules them)."""

from __future__ import annotations

import numpy as np

from roofline import _num
from roofline._estimate import Num

# Hopper's prefill kernels are warp-specialised and persistent: FlashAttention-3 (Shah et al. 2024, §3.1-3.2) and
# FlashInfer 0.7.4's port of it (include/flashinfer/attention/hopper/). A producer warp loads Q, K and V by TMA into
# two stages (prefill_sm90.cuh: NUM_STAGES_ = 2) while one or two consumer warpgroups run the asynchronous wgmma
# products; a consumer issues the next block's Q·Kᵀ and this block's P·V before it computes the softmax
# (mainloop_mma.cuh: two gemm(..., wg_wait = -1), then attention_updater.update) and the warpgroups take turns
# (WarpScheduler::barrier_sync / barrier_arrive), so the softmax runs behind the products. A batch prefill runs a
# persistent grid (tile_scheduler.cuh: BatchPrefillPersistentTileScheduler). Their tiles, CTA_Q × CTA_KV
# (getCTATileSize): head_dim 64: 192 × 128; 128: 128 × 128 causal, 128 × 192 otherwise; 192 (DeepSeek's q and k,
# with a v of 128): 128 × 128; 256: 128 × 64. TensorRT-LLM's and cuDNN's Hopper kernels are of the same kind
# (fmha_v2's sm90 kernels are warp-specialised, `warp_specialization` in FlashInfer's fmha_v2 generator).
# Blackwell (sm_100) is not listed: B200's context kernel pays a cost per wave of thread blocks that grows with the
# tile's work (docs/decisions/0049 §2), the opposite of a persistent grid's; its cubins have no source on file.
WARP_SPECIALISED_PREFILL_ARCHITECTURES = ("sm_90",)
# FlashAttention-2's kernels issue mma.sync, which reaches about 2/3 of Hopper's tensor-core peak; only the
# asynchronous wgmma reaches the peak (Shah et al. 2024, FlashAttention-3 §2.2, after Luo et al. 2024's
# microbenchmarks of Hopper). Elsewhere mma.sync is the architecture's own matrix instruction (Ampere, Ada, sm_120).
MMA_SYNC_PEAK_FRACTION = {"sm_90": 2.0 / 3.0}


def hopper_prefill_tile(head_dim: Num, causal: bool) -> tuple[Num, Num]:
    """Query rows and keys of a Hopper prefill kernel's tile (`WARP_SPECIALISED_PREFILL_ARCHITECTURES`)."""
    d = _num.num(head_dim)
    rows = _num.where(d <= 64.0, 192.0, 128.0)
    wide = _num.where(d <= 192.0, 128.0, 64.0)
    keys = _num.where(d <= 64.0, 128.0, _num.where(d <= 128.0, 128.0 if causal else 192.0, wide))
    return rows, keys


# FlashAttention-2's kernels (flash-attn 2.8.3, csrc/flash_attn/): the tile of its forward kernel (query rows, keys)
# by head_dim, without dropout (src/flash_fwd_launch_template.h, run_mha_fwd_hdim*): 64: 128 × 128; 96, 128, 192:
# 128 × 64, except on sm_86/sm_89 (`is_sm8x`), where causal 96 and 128 take 64 × 64 and non-causal 128 takes
# 128 × 32; 256: 128 × 64 where an SM has under 4·256·(64 + 2·64) B = 192 KiB of shared memory, 64 × 64 above (two
# blocks per SM on Hopper's 228 KiB). With its keys split, the split kernel's tile: 64 rows (kBlockM, "fixed for all
# head dimensions") × 256 keys up to head_dim 64, 128 up to 128, 64 above (run_mha_fwd_splitkv_dispatch).
FA2_SPLIT_ROWS = 64.0
FA2_MAX_SPLITS = 128.0  # num_splits_heuristic's cap (set_params_splitkv)
FA2_SPLIT_FILL = 0.8  # one split when the grid already fills this share of 2 blocks per SM
FA2_SPLIT_EFFICIENCY = 0.85  # the fewest splits within this share of the best wave efficiency
# SDPA's FlashAttention-2 call reads K and V from contiguous tensors (mha_fwd: no block table), so no lookup comes
# first; but a thread block issues its first V tile only once its Q and first K tile have arrived
# (src/flash_fwd_kernel.h, compute_attn_1rowblock: copy Q, copy K, cp_async_wait<0>, then copy V), so two memory
# latencies pass in series before its first P·V product.
FA2_KV_ROUND_TRIPS = 2.0


def fa2_split_keys(head_dim: Num) -> Num:
    """Keys per block of FlashAttention-2's split kernel (`FA2_SPLIT_ROWS`)."""
    d = _num.num(head_dim)
    return _num.where(d <= 64.0, 256.0, _num.where(d <= 128.0, 128.0, 64.0))


def fa2_tile(head_dim: Num, causal: bool, architecture: str | None, shared_bytes_per_unit: float) -> tuple[Num, Num]:
    """Query rows and keys of FlashAttention-2's forward tile (`FA2_SPLIT_ROWS`'s table) on `architecture`."""
    d = _num.num(head_dim)
    sm8x = architecture in ("sm_86", "sm_87", "sm_89")
    # head_dim 256: 128 × 64 when a block may take 2·256·(128 + 2·64) B of shared memory but an SM has under
    # 4·256·(64 + 2·64) B (two 64-row blocks); the profile's shared memory per SM stands for both limits.
    tall = 2.0 * 256.0 * (128.0 + 128.0) <= shared_bytes_per_unit < 4.0 * 256.0 * (64.0 + 128.0)
    if sm8x:
        mid_rows, mid_keys = (64.0, 64.0) if causal else (128.0, 32.0)
    else:
        mid_rows, mid_keys = 128.0, 64.0
    big_rows = _num.where(d <= 192.0, 128.0, 128.0 if tall else 64.0)
    rows = _num.where(d <= 64.0, 128.0, _num.where(d <= 128.0, mid_rows, big_rows))
    keys = _num.where(d <= 64.0, 128.0, _num.where(d <= 128.0, mid_keys, 64.0))
    return rows, keys


def fa2_splits(tiles: Num, units: float, key_blocks: Num) -> Num:
    """FlashAttention-2's key splits (flash_api.cpp, num_splits_heuristic(batch · heads · m-blocks, 2 · SMs,
    key blocks, 128)): one when the grid fills 0.8 of two blocks per SM; otherwise the fewest eligible splits whose
    wave efficiency (n_waves / ⌈n_waves⌉) is within 0.85 of the best, a split being eligible when it changes the
    blocks each split walks."""
    point = _num.is_point(tiles, key_blocks)
    t, nb = np.atleast_1d(np.asarray(tiles, dtype=np.float64)), np.atleast_1d(np.asarray(key_blocks, dtype=np.float64))
    t, nb = np.broadcast_arrays(t, nb)
    sms = 2.0 * units
    cap = np.minimum(min(FA2_MAX_SPLITS, sms), nb)
    n = np.arange(1.0, FA2_MAX_SPLITS + 1.0).reshape((-1,) + (1,) * t.ndim)
    previous = np.maximum(n - 1.0, 1.0)
    eligible = ((n == 1.0) | (np.ceil(nb / n) != np.ceil(nb / previous))) & (n <= cap)
    waves = t * n / sms
    efficiency = np.where(eligible, waves / np.ceil(waves), 0.0)
    chosen = eligible & (efficiency >= FA2_SPLIT_EFFICIENCY * efficiency.max(axis=0))
    first = np.argmax(chosen, axis=0) + 1.0
    out = np.where(t >= FA2_SPLIT_FILL * sms, 1.0, first)
    return float(out.reshape(-1)[0]) if point else out
