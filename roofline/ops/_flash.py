"""The tile schedule of a flash-attention kernel: thread blocks of query rows walking K/V blocks, split keys, and
TensorRT-LLM's XQA decode kernel's own split and in-kernel merge."""

from __future__ import annotations

import math

import numpy as np

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware
from roofline.ops._tile_search import PARTIAL_BYTES, SPLIT_K

# MMA instructions work on 16-row fragments (mma.m16n8k16 on Ampere and Hopper tensor cores): a tile never has fewer.
MMA_ROWS = 16

# TensorRT-LLM's XQA kernel, which runs decode for groups of 2 to `DECODE_MAX_PACKED_GROUP` query heads per K/V head
# (TensorRT-LLM XQA mha.cu, FlashInfer 0.7.2 port, csrc/xqa/mha.cu; the sm80 kernel). Group 1 and masked MHA run
# TensorRT-LLM's masked-MHA kernel, whose source is not on file: they keep `PAGED_KV_ROUND_TRIPS`.
# - A thread block is 8 warps (ctaShapeInWarps {4, 1, 2}, l. 76) walking 256 keys per step (ctaTile.x = 4 × 64,
#   l. 89-100). Its shared memory (struct SharedMem, l. 330-356: K 4 warps × 2 buffers × 64 keys × 128 B = 64 KiB,
#   V 2 × 2 × 2 × 64 × 128 B = 64 KiB, Q, X and row maxima ~14-26 KiB for 16-32 rows) is over half of the 164 KiB an
#   A100 SM has, and it is launched with __launch_bounds__(256, 1) on sm80 (l. 2886, 2894): one block per SM, as
#   the profile's one tile per unit says; a decode grid runs in waves of `units` blocks.
# - Before its first product a block waits for three device-memory loads in series: the sequence's length
#   (getCacheSeqLen, l. 1772), the page index, read only below nbPages = ⌈length / tokensPerPage⌉ (l. 1794, 1851;
#   mhaUtils.cuh getPage, l. 298), and the K tile at that page (loadKTilePart, l. 1945). V takes the same chain in
#   the other warps. RL-ASSUME: each waits the profile's loaded memory latency.
XQA_KV_ROUND_TRIPS = 3.0
# - Keys are split over n = min(max(1, ⌊SMs / (batch · kv heads)⌋), ⌈max length / 256⌉) blocks per sequence
#   (launchMHA, l. 3016-3029), a rule rather than a cost search. The blocks of a sequence combine inside the kernel,
#   with no second launch: each stores its row maxima, sums and output tile to scratch and increments the sequence's
#   semaphore (atom.acq_rel.gpu, l. 2760); the last one then reads the n row maxima 8 loads at a time
#   (mergeRowMax<8>, l. 1485-1515, 2776), then the n tiles, each of its V warp groups (4 / min(head_dim / 64, 4),
#   gemm1NbWarpGrps, l. 95-98) taking every other tile through a double buffer (nbTileBuffers = 2, l. 2737,
#   2809-2818): 1 + ⌈n / 8⌉ + ⌈⌈n / groups⌉ / 2⌉ round trips in series. RL-ASSUME: the maximum length the
#   framework passes is the op's cache length (the op knows no other); TensorRT-LLM's own host code, which may pick
#   n otherwise, is not on file.
XQA_WARPS = 4.0  # ctaShapeInWarps.x: the warps of each half
XQA_WARP_KEYS = 64.0  # warpTile.x
XQA_CTA_KEYS = XQA_WARPS * XQA_WARP_KEYS  # ctaTile.x
XQA_ROW_MAX_LOADS = 8.0  # mergeRowMax<8>
XQA_TILE_BUFFERS = 2.0  # nbTileBuffers
# How this compares with measured XQA decode, and what the source does not explain: docs/model/attention.md.

# A decode kernel reads a paged KV cache (vLLM's PagedAttention, Kwon et al. 2023; TensorRT-LLM's XQA and masked-MHA
# kernels read `kv_cache_block_offsets`): a thread block learns where its first K/V page lives from the block table
# and only then can request it, two device-memory round trips in series (as an embedding waits for its token id)
# before its first product. With one decode thread block per compute unit, no other block hides them, so every wave
# of decode tiles (one query per sequence, packed) waits at least this many latencies. RL-ASSUME: the table entry
# is not in L2 already. XQA's own source shows a third
# load ahead of these, the sequence length (`XQA_KV_ROUND_TRIPS`); this count stays for the kernels whose source is
# not on file.
PAGED_KV_ROUND_TRIPS = 2.0
# A prefill (context) thread block of TensorRT-LLM's FMHA reads K and V from the paged cache the call's
# pre-processing kernel has just written (Q in, paged K/V: fmha_v2's `Q_PAGED_KV` input layout, as known; that
# kernel's source is not on file), so it takes XQA's chain before its first product: the sequence's offsets
# (cu_seqlens), the page index, then the K tile. Each wave of prefill tiles waits at least these latencies in
# series, as decode tiles do (docs/decisions/0035).
CONTEXT_KV_ROUND_TRIPS = XQA_KV_ROUND_TRIPS

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


def flash_tiles(
    hw: Hardware,
    shape: tuple[Num, Num, Num, Num, Num, Num],
    block: Num,
    causal: bool,
    peak: float,
    s: float,
    dtype: str,
    first_kv_s_per_byte: Num | None = None,
    window: Num | None = None,
    io_s_per_byte: Num | None = None,
    kv_block: Num | None = None,
    warp_specialised: _num.Bool = False,
    splits: Num | None = None,
    kv_round_trips: float | None = None,
) -> dict[str, Num]:
    """The tile schedule of a flash-attention kernel (shape = batch, heads, kv_heads, head_dim, q_len, kv_len):
    its time on the compute units and their exposed waits, in seconds.

    A thread block owns `tile_rows` query rows of one head (or, for short queries, the rows of all h/kv_h heads
    that share a K/V head, as FlashDecoding and TensorRT-LLM's XQA pack them; never fewer than `MMA_ROWS`) and walks
    the K/V blocks of `block` keys, skipping those above a causal diagonal (Dao et al. 2022; FlashAttention-2, Dao
    2023). Per block it runs the two products on the matrix unit and the online softmax (~5 FP32 operations and
    one exp per score) on the vector and special-function units; on Ampere these do not overlap within a warp
    (FlashAttention-2 §3.1 on non-matmul FLOPs; FlashAttention-3 §3.1 overlaps them only with Hopper's
    asynchronous warpgroups), so a block costs the sum of the three. Blocks are scheduled over the device's slots
    like matmul tiles: the time is the larger of the average load per slot and the longest thread block. A grid
    with fewer thread blocks than slots may split the keys (FlashDecoding; `SPLIT_K`) and combine the partial
    outputs in a second kernel; XQA (decode of 2 to `DECODE_MAX_PACKED_GROUP` query heads per K/V head) splits by
    its own rule and combines in the same kernel (`XQA_ROW_MAX_LOADS`). Each wave waits for its query tile and first
    K/V block and stores its output tile, at the active thread blocks' share of bandwidth (`K_STEP`), and a decode
    tile (one query per sequence) waits at least `PAGED_KV_ROUND_TRIPS` memory latencies (XQA: `XQA_KV_ROUND_TRIPS`)
    for its first K/V page, a prefill tile `CONTEXT_KV_ROUND_TRIPS`. `launches`: the kernels it takes (2 with a
    second, combining kernel).
    `first_kv_s_per_byte` and `io_s_per_byte`: seconds per byte of a wave's first K/V block and of its query and
    output tiles (default: device memory's; a call served from a warm L2 passes the L2's).

    `kv_block`: keys per K/V block when a kernel's tile is not square (default: `block`, the query tile's rows).
    `warp_specialised` (per point): a Hopper-class prefill kernel (`hopper_prefill_tile`): the softmax of one
    block runs while the products of the next run, so a block costs the larger of the two, and a persistent grid's
    producer warp loads the next tile's Q, K and V while this one computes, so only the first wave waits for them.
    `splits`: the key splits a library's own rule gives (`fa2_splits`), taken as they are (no search, no XQA);
    `kv_round_trips`: the memory latencies before a tile's first product when K and V are not paged.

    A sliding `window` (kv_len already cut to the keys some query sees, `window_keys`): a tile of P query positions
    walks only the blocks of its band, the P + w − 1 keys from its first row's window to its last row, and meets a
    block edge half a block on average at each end (as the causal diagonal): P + w − 1 keys / block + 1/2 blocks.
    """
    b, h, kvh, d, q, kv = shape
    kv_block = block if kv_block is None else kv_block
    slots = hw.units * hw.concurrent_tiles_per_unit
    bw = hw.memory_bytes_per_s * hw.eff_memory
    group = h / kvh
    rows = q * group
    packed = rows <= block  # all query rows of a K/V head fit one tile
    heads_per_grid = _num.where(packed, b * kvh, b * h)
    tile_rows = _num.minimum(block, _num.ceil(_num.where(packed, rows, q) / MMA_ROWS) * MMA_ROWS)
    positions = _num.where(packed, q, tile_rows)  # query positions one tile covers
    n_q = _num.ceil(q / positions)
    n_kv = _num.ceil(kv / kv_block)
    if causal:
        first = kv - q  # keys every query sees
        blocks = n_q * first / kv_block + positions * n_q * (n_q + 1.0) / (2.0 * kv_block) + n_q / 2.0
        blocks = _num.minimum(_num.maximum(blocks, n_q), n_q * n_kv)  # np.clip's order: the lower bound, then the upper
        if window is not None:
            band = _num.minimum(positions + _num.num(window) - 1.0, kv)
            blocks = _num.minimum(blocks, n_q * (band / kv_block + 0.5))
            n_kv = _num.minimum(n_kv, _num.ceil(band / kv_block) + 1.0)  # the longest thread block's walk
    else:
        blocks = n_q * n_kv
    # The online softmax runs on the fp32 accumulators of S = Q·Kᵀ whatever the input type (FlashAttention-2's
    # flash_fwd_kernel.h: acc_s is an ElementAccum = float fragment), so at the fp32 vector rate, not a packed one.
    vector_peak = hw.vector_peak("fp32")
    sfu = hw.special_function_ops_per_s or vector_peak / 4.0
    scores = tile_rows * kv_block
    products = 4.0 * scores * d / (peak * hw.eff_matmul)
    softmax = 5.0 * scores / (vector_peak * hw.eff_vector) + scores / (sfu * hw.eff_vector)
    per_block = slots * _num.where(warp_specialised, _num.maximum(products, softmax), products + softmax)
    decode = packed & (q == 1.0)  # one new token per sequence against its cache
    xqa = decode & (group > 1.0) & (splits is None)  # masked MHA comes here with kv_heads = heads
    latency = hw.memory_latency_s or 0.0
    page_wait = _num.where(xqa, XQA_KV_ROUND_TRIPS, _num.where(decode, PAGED_KV_ROUND_TRIPS, CONTEXT_KV_ROUND_TRIPS))
    page_wait = (page_wait if kv_round_trips is None else kv_round_trips) * latency
    first_kv = 2.0 * _num.minimum(kv_block, kv) * d * s
    kv_s_per_byte = 1.0 / bw if first_kv_s_per_byte is None else first_kv_s_per_byte
    io = 1.0 / bw if io_s_per_byte is None else io_s_per_byte  # a tile's query rows in and output out

    point = _num.is_point(per_block, blocks, heads_per_grid)
    xp = _num.FLOATS if point else _num.ARRAYS  # the split search runs these many times

    def schedule(split: Num, combine_s: Num) -> tuple[Num, Num, Num]:
        """Seconds on the units, exposed waits and thread blocks with the keys split `split` ways."""
        ctas = heads_per_grid * n_q * split
        per_cta = xp.ceil(n_kv / split)
        seconds = xp.maximum(heads_per_grid * blocks / slots, per_cta) * per_block
        waves = xp.where(warp_specialised, 1.0, xp.ceil(ctas / slots))
        partial = split > 1.0
        out_bytes = tile_rows * d * xp.where(partial, PARTIAL_BYTES, s)
        exposed = waves * ((tile_rows * d * s + out_bytes) * io + first_kv * kv_s_per_byte) * xp.minimum(ctas, slots)
        exposed = xp.maximum(exposed, waves * page_wait)
        seconds = seconds + xp.where(partial, 2.0 * PARTIAL_BYTES * split * b * h * q * d * io, 0.0)
        return seconds, exposed + xp.where(partial, combine_s, 0.0), ctas

    if splits is not None:
        seconds, exposed, ctas = schedule(splits, hw.launch_s)
        launches = _num.where(splits > 1.0, 2.0, 1.0)
        return {"seconds": seconds, "exposed_s": exposed, "kv_splits": splits + _num.zeros_like(seconds),
                "ctas": ctas, "launches": launches + _num.zeros_like(seconds)}  # fmt: skip
    best: Num = (
        math.inf if point else np.full(np.broadcast_shapes(*map(np.shape, (per_block, blocks, heads_per_grid))), np.inf)
    )
    out: dict[str, Num] = {
        name: _num.zeros_like(best) for name in ("seconds", "exposed_s", "kv_splits", "ctas", "launches")
    }
    if not (point and xqa):
        for split in SPLIT_K:
            seconds, exposed, ctas = schedule(float(split), hw.launch_s)
            if split > 1:
                exposed = xp.where(heads_per_grid * n_q < slots, exposed, math.inf)
            total = seconds + exposed
            better = total < best
            best = xp.where(better, total, best)
            launches = 2.0 if split > 1 else 1.0
            for name, value in (
                ("seconds", seconds), ("exposed_s", exposed), ("kv_splits", float(split)), ("ctas", ctas),
                ("launches", launches),
            ):  # fmt: skip
                out[name] = xp.where(better, value, out[name])
    if not point or xqa:
        fill = -_num.ceil(-(hw.units / heads_per_grid))  # ⌊SMs / (batch · kv heads)⌋
        split_x = _num.minimum(_num.maximum(1.0, fill), _num.ceil(kv / XQA_CTA_KEYS))
        # The last block's merge (`XQA_ROW_MAX_LOADS`): the semaphore, the row maxima, then each V warp group's tiles.
        warp_groups = XQA_WARPS / _num.minimum(_num.maximum(d / XQA_WARP_KEYS, 1.0), XQA_WARPS)
        tiles_each = _num.ceil(split_x / warp_groups)
        combine = 1.0 + _num.ceil(split_x / XQA_ROW_MAX_LOADS) + _num.ceil(tiles_each / XQA_TILE_BUFFERS)
        seconds, exposed, ctas = schedule(split_x, combine * latency)
        for name, value in (
            ("seconds", seconds), ("exposed_s", exposed), ("kv_splits", split_x), ("ctas", ctas), ("launches", 1.0),
        ):  # fmt: skip
            out[name] = _num.where(xqa, value, out[name])
    return out
