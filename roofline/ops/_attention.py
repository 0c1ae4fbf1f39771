"""Attention: the naive two-kernel form, its fused per-head variant and flash attention (prefill, decode, masked
MHA), with the tile schedule of `roofline.ops._flash`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware, dtype_bytes
from roofline._kernels import Kernel
from roofline._num import Bool
from roofline.ops._flash import FlashShape, FlashTile, FlashWaits, flash_tiles
from roofline.ops._flash_kernels import (
    FA2_KV_ROUND_TRIPS,
    FA2_SPLIT_ROWS,
    MMA_SYNC_PEAK_FRACTION,
    WARP_SPECIALISED_PREFILL_ARCHITECTURES,
    fa2_split_keys,
    fa2_splits,
    fa2_tile,
    hopper_prefill_tile,
)

# TensorRT-LLM's XQA decode kernel packs the query heads of one K/V head into one thread block for groups of at
# most 32 query heads (`XQA_KV_ROUND_TRIPS` cites its source); larger groups fall back to its masked-MHA kernel, one
# thread block per query head. Its blocks have 256 threads for long caches (FasterTransformer's and TensorRT-LLM's
# mmha launcher: 64, 128 or 256 threads as the cache grows), so units × threads per unit / 256 of them are resident.
# RL-ASSUME: occupancy is limited by threads alone.
DECODE_MAX_PACKED_GROUP = 32
MMHA_BLOCK_THREADS = 256


def causal_pairs(q_len: Num, kv_len: Num, window: Num | None = None) -> Num:
    """Query-key pairs a causal mask keeps when the q_len queries are the last of kv_len positions:
    q·(kv − q) + q·(q + 1)/2.

    With a sliding window of w keys (local attention: the query at position p sees keys p − w + 1 … p, itself
    included; Mistral 7B, Jiang et al. 2023, §2; Gemma 2 and gpt-oss's local layers), the query at position p sees
    min(p + 1, w) keys. The first c = clip(w − (kv − q), 0, q) queries sit inside the first window and see p + 1
    keys each, c·(kv − q) + c·(c + 1)/2 in all; the other q − c see w each. A window of kv keys or more is no window.
    """
    q, kv = _num.num(q_len), _num.num(kv_len)
    if window is None:
        return q * (kv - q) + q * (q + 1.0) / 2.0
    w = _num.minimum(_num.num(window), kv)
    first = kv - q
    c = _num.minimum(_num.maximum(w - first, 0.0), q)
    return c * first + c * (c + 1.0) / 2.0 + (q - c) * w


def window_keys(q_len: Num, kv_len: Num, window: Num | None) -> Num:
    """Keys that the last q_len of kv_len positions see through a sliding window of `window` keys (None: all):
    min(kv, q + w − 1), the span from the first query's window to the last query. A decode step (q = 1) reads
    min(kv, w) keys of its cache."""
    kv = _num.num(kv_len)
    if window is None:
        return kv
    return _num.minimum(kv, _num.num(q_len) + _num.num(window) - 1.0)


# The records `attention`'s steps pass: slotted dataclasses, never changed once built, not frozen ones: a frozen
# dataclass sets each field through object.__setattr__, about four times the build time, and a point's estimate is a
# budget of microseconds (`roofline._num`).
@dataclass(slots=True)
class _Call:
    """One attention call: its sizes (`kv` cut to the keys some query's window sees, but for the naive form), its
    element bytes and type, its products' peak and unit, its form and mask, the query-key pairs a window keeps
    (None: no window, or the naive form), and the bytes of Q (and of O), of K and of V."""

    b: Num
    h: Num
    kvh: Num
    d: Num
    q: Num
    kv: Num
    s: float
    dtype: str
    peak: float
    unit: str
    implementation: str
    causal: bool
    window: Num | None
    window_pairs: Num | None
    q_bytes: Num
    k_bytes: Num
    v_bytes: Num


@dataclass(slots=True)
class _Launch:
    """How a flash kernel runs a call: its tile (query rows × keys; warp specialised, per point), the heads and
    queries its grid spans (FlashAttention-2's swapped decode runs a group's query heads as queries), its mask, the
    key splits a library's own rule gives (None: the schedule's) and where decode is swapped."""

    rows: Num
    keys: Num
    specialised: Bool
    heads: Num
    q_len: Num
    causal: bool
    splits: Num | None
    swap: Bool


def attention(
    hw: Hardware,
    batch: Num,
    heads: Num,
    kv_heads: Num,
    head_dim: Num,
    q_len: Num,
    kv_len: Num,
    causal: bool = True,
    implementation: str = "flash",
    dtype: str = "bf16",
    window: Num | None = None,
) -> list[Kernel]:
    """softmax(Q·Kᵀ/√d)·V for batch × heads queries of length q_len over kv_len keys (MHA, GQA or MQA).

    FLOPs: 4·b·h·pairs·d for the two products (pairs = q·kv, or the causal count for flash, which skips masked
    blocks; the naive form computes the full matrix and masks it). Bytes:
    - naive: two kernels over all heads (S = softmax(Q·Kᵀ), then O = S·V), so Q, K, V, O once plus the whole
      b·h·q·kv score matrix written to device memory and read back (seed 001: intensity ≈ head_dim), however small
      one head's scores are;
    - fused_per_head: one fused kernel per head of one example (seed 001's "handle each example independently"):
      its q·kv scores stay on chip when they fit in the cache and local memories, and go through device memory as
      naive's otherwise;
    - flash (Dao et al. 2022; FlashAttention-2, Dao 2023): Q and O once; K and V once per query block of
      Br = min(⌈M/4d⌉, d) rows (M = on-chip memory per unit, in elements), unless one kv head's K and V fit in
      the cache, when the re-reads hit it (intensity ≈ q/2 for prefill).

    `window`: sliding-window (local) attention, each query seeing its last `window` keys (`causal_pairs`); it
    needs `causal`. The kernel reads only the keys inside some query's window (`window_keys`) and skips the
    blocks outside the band (`flash_tiles`); the naive form computes the full matrix and masks it.

    Math time: naive, the FLOPs at the matrix peak; flash, the tile schedule of `flash_tiles` (`roofline.ops._flash`:
    Br × Br blocks over the device's slots, softmax work not overlapped with the products, split keys for small
    grids).
    """
    if window is not None and not causal:
        raise ValueError("a sliding window needs a causal mask")
    call = _call(hw, (batch, heads, kv_heads, head_dim, q_len, kv_len), causal, implementation, dtype, window)
    if implementation in ("naive", "fused_per_head"):
        return _unfused(hw, call)
    launch = _launch(hw, call)
    kernel = _flash_kernel(hw, call, launch)
    if implementation != "flash2" or not np.any(launch.swap):
        return [kernel]
    return [kernel, _swapped_layout_copies(hw, call, launch.swap)]


def _call(
    hw: Hardware, sizes: tuple[Num, Num, Num, Num, Num, Num], causal: bool, implementation: str, dtype: str,
    window: Num | None,
) -> _Call:  # fmt: skip
    """The call's sizes as numbers (a window's keys cut), its bytes and its products' rate."""
    batch, heads, kv_heads, head_dim, q_len, kv_len = sizes
    b, h, kvh, d = _num.num(batch), _num.num(heads), _num.num(kv_heads), _num.num(head_dim)
    q, kv, s = _num.num(q_len), _num.num(kv_len), dtype_bytes(dtype)
    window_pairs: Num | None = None
    if window is not None and implementation != "naive":
        # A flash kernel never touches the keys before the first query's window: it runs as attention over those.
        window_pairs = causal_pairs(q, kv, window)
        kv = window_keys(q, kv, window)
    peak, unit = hw.matrix_peak(dtype)
    if implementation == "flash2":  # FlashAttention-2's mma.sync kernels, whatever the device runs natively
        peak = peak * MMA_SYNC_PEAK_FRACTION.get(hw.architecture or "", 1.0)
    q_bytes = s * b * h * q * d
    k_bytes = v_bytes = s * b * kvh * kv * d
    return _Call(b, h, kvh, d, q, kv, s, dtype, peak, unit, implementation, causal, window, window_pairs, q_bytes,
                 k_bytes, v_bytes)  # fmt: skip


def _product(hw: Hardware, call: _Call, pairs: Num, external: Num, chained: Num, out: Num, softmax: bool) -> Kernel:
    """A kernel of one product over `pairs` query-key pairs per head (with the softmax's vector and exp work)."""
    b, h, d = call.b, call.h, call.d
    flops = 2.0 * b * h * pairs * d
    vector = 5.0 * b * h * pairs if softmax else 0.0
    return Kernel(
        flops=flops + vector,
        matrix_s=flops / (call.peak * hw.eff_matmul),
        vector_flops=vector,
        sfu_ops=b * h * pairs if softmax else 0.0,
        external_in_bytes=external,
        chained_in_bytes=chained,
        out_bytes=out,
        peak=call.peak,
        unit=call.unit,
        assumptions={"attention": call.implementation, "causal": call.causal},
    )


def _unfused(hw: Hardware, call: _Call) -> list[Kernel]:
    """The naive form's two kernels over all heads, or a fused kernel per head's, the scores between them."""
    b, h, d, q, s = call.b, call.h, call.d, call.q, call.s
    full_pairs = q * call.kv
    scores = s * b * h * full_pairs
    # Only a per-head fused kernel can keep a head's scores on chip; naive's kernels each span all heads.
    fits = _num.where(s * full_pairs <= hw.on_chip_bytes, 1.0, 0.0) if call.implementation == "fused_per_head" else 0.0
    spilled = _num.where(fits > 0.0, 0.0, scores)
    # Kernel 1: S = softmax(Q·Kᵀ) written out; kernel 2: O = S·V reads it back.
    first = _product(hw, call, full_pairs, call.k_bytes, call.q_bytes, spilled, softmax=True)
    second = _product(hw, call, full_pairs, call.v_bytes, spilled, s * b * h * q * d, softmax=False)
    first.extra = {"score_bytes": scores, "scores_fit_on_chip": fits + _num.zeros_like(scores)}
    return [first, second]


def _launch(hw: Hardware, call: _Call) -> _Launch:
    """The flash kernel's tile: Br × Br (Dao et al.), the architecture's own prefill kernel's, or FlashAttention-2's."""
    if call.implementation == "flash2":
        return _fa2_launch(hw, call)
    d, q = call.d, call.q
    m_elems = hw.local_bytes_per_unit / call.s if hw.local_bytes_per_unit else 1.0e5
    br = _num.minimum(_num.ceil(m_elems / (4.0 * d)), d)
    # The architecture's own prefill kernel class: Hopper's warp-specialised, persistent kernels and their tiles.
    native = call.implementation == "flash" and hw.architecture in WARP_SPECIALISED_PREFILL_ARCHITECTURES
    specialised: Bool = (q > 1.0) if native else False
    kv_block: Num = br
    if native:
        rows, keys = hopper_prefill_tile(d, call.causal)
        br, kv_block = _num.where(specialised, rows, br), _num.where(specialised, keys, br)
    return _Launch(br, kv_block, specialised, call.h, q, call.causal, None, False)


def _fa2_launch(hw: Hardware, call: _Call) -> _Launch:
    """FlashAttention-2's tile and key splits (`fa2_tile`, `fa2_splits`)."""
    b, h, kvh, d, q = call.b, call.h, call.kvh, call.d, call.q
    # One-token decode with grouped heads runs as a prefill of the group's query heads against their K/V head
    # (flash_api.cpp lines 406-413, `seqlenq_ngroups_swapped`: no window, head_dim % 8 = 0), without a causal mask
    # (seqlen_q = 1 is not causal), its keys split by FlashAttention-2's own rule.
    swap = (q == 1.0) & (h > kvh) & (call.window is None)
    tile_h, tile_q = _num.where(swap, kvh, h), _num.where(swap, h / kvh, q)
    tile_causal = call.causal and not bool(np.all(np.asarray(q) == 1.0))
    split_keys = fa2_split_keys(d)
    m_blocks = _num.ceil(tile_q / FA2_SPLIT_ROWS)
    splits = fa2_splits(b * tile_h * m_blocks, float(hw.units), _num.ceil(call.kv / split_keys))
    rows, keys = fa2_tile(d, tile_causal, hw.architecture, hw.local_bytes_per_unit or 0.0)
    split = splits > 1.0
    rows, keys = _num.where(split, FA2_SPLIT_ROWS, rows), _num.where(split, split_keys, keys)
    return _Launch(rows, keys, False, tile_h, tile_q, tile_causal, splits, swap)


def _flash_kernel(hw: Hardware, call: _Call, launch: _Launch) -> Kernel:
    """The flash kernel: both products and the softmax over the pairs it keeps, its K/V traffic, and the time of its
    tile schedule (`flash_tiles`)."""
    b, h, kvh, q = call.b, call.h, call.kvh, call.q
    if call.window_pairs is not None:
        pairs = call.window_pairs
    else:
        pairs = causal_pairs(q, call.kv) if call.causal else q * call.kv
    rereads = _kv_reads(hw, call, launch, pairs)
    per_head, shared, in_cache = _masked_mha_sharing(hw, call)
    kernel = _product(
        hw, call, pairs, (call.k_bytes + call.v_bytes) * rereads + _num.where(in_cache, 0.0, shared), call.q_bytes,
        call.s * b * h * q * call.d, True,
    )  # fmt: skip
    kernel.cache_in_bytes = _num.where(in_cache, shared, 0.0)
    kernel.flops = kernel.flops + 2.0 * b * h * pairs * call.d  # the second product, in the same kernel
    tiles = flash_tiles(
        hw, FlashShape(b, launch.heads, _num.where(per_head, h, kvh), call.d, launch.q_len, call.kv),
        FlashTile(launch.rows, launch.keys, launch.causal, call.window, launch.specialised), call.peak, call.s,
        _first_waits(hw, call, per_head, in_cache), launch.splits,
    )  # fmt: skip
    kernel.matrix_s = tiles.pop("seconds")
    # Split keys: the partial outputs are combined by a second kernel (FlashDecoding), or inside the same one (XQA).
    launches = tiles.pop("launches")
    kernel.exposed_s = tiles.pop("exposed_s") - (launches - 1.0) * hw.launch_s
    kernel.launches = launches
    kernel.extra = {"query_block_rows": launch.rows + _num.zeros_like(q), "kv_reads": rereads, **tiles}
    return kernel


def _kv_reads(hw: Hardware, call: _Call, launch: _Launch, pairs: Num) -> Num:
    """How many times the kernel reads K and V from device memory: once when a head's re-reads hit L2, else once per
    query block, for the share of the keys its rows see."""
    br, tile_q = launch.rows, launch.q_len
    # Whether a head's K/V re-reads are served by L2: the grids run a head's query blocks together (FlashAttention-2,
    # flash_fwd_launch_template.h: `grid(num_m_block, b, h)`; TensorRT-LLM's fmha_v2 flash kernels, fa_kernel.jinja
    # in FlashInfer 0.7.4: `grid(loop_iters, h, b); // better locality`), so one unit per block holds the K/V of
    # ⌈units / query blocks⌉ heads at a time, not one head per unit (decision 0055).
    live = _num.minimum(call.b * call.kvh, _num.ceil(float(hw.units) / _num.ceil(tile_q / br)))
    kv_fits = (call.k_bytes + call.v_bytes) / (call.b * call.kvh) * live <= hw.cache_bytes
    # Each query block re-reads the keys its rows see: a share pairs / (q·kv) of them, or with a window the
    # br + w − 1 keys of its band.
    window = call.window
    share = pairs / (call.q * call.kv) if window is None else window_keys(br, call.kv, window) / call.kv
    return _num.where(kv_fits, 1.0, _num.maximum(1.0, _num.ceil(tile_q / br) * share))


def _masked_mha_sharing(hw: Hardware, call: _Call) -> tuple[Bool, Num, Bool]:
    """Decode that runs masked MHA (groups over `DECODE_MAX_PACKED_GROUP`): whether it does, the K/V bytes its query
    heads read again after the first (group − 1 reads of their group's K and V), and whether L2 serves those."""
    group = call.h / call.kvh
    per_head = (call.q == 1.0) & (group > DECODE_MAX_PACKED_GROUP) & (call.implementation != "flash2")
    # One thread block per query head, each reading its group's K and V. The first read comes from device memory;
    # the other group − 1 come from L2 (when the device's L2 bandwidth is known) while the group's blocks stream it
    # together (below), from device memory otherwise.
    shared = _num.where(per_head, (group - 1.0) * (call.k_bytes + call.v_bytes), 0.0)
    if hw.shared_l2_read_bytes_per_s is None or hw.threads_per_unit is None:
        return per_head, shared, False
    # The masked-MHA grid is (heads, batch, KV chunks) with the head fastest (TensorRT-LLM's
    # decoderMaskedMultiheadAttentionTemplate.h: hi = blockIdx.x, hi_kv = hi / (heads / kv_heads)), so the blocks
    # of one group are dispatched together and walk their K/V from the first key at the same pace: while they are
    # resident at once, the lines one of them brings in are read by the others within a few K/V steps, and the
    # L2 holds that window, not the whole cache. Otherwise the group's K/V must fit in L2 across its waves.
    resident_blocks = hw.units * hw.threads_per_unit / MMHA_BLOCK_THREADS
    resident_groups = _num.minimum(call.b * call.kvh, _num.ceil(resident_blocks / group))
    whole_fits = resident_groups * (call.k_bytes + call.v_bytes) / (call.b * call.kvh) <= hw.cache_bytes
    return per_head, shared, (group <= resident_blocks) | whole_fits


def _first_waits(hw: Hardware, call: _Call, per_head: Bool, in_cache: Bool) -> FlashWaits:
    """The rates a wave's first K/V step and its query and output tiles move at, and FlashAttention-2's latency
    chain (`FA2_KV_ROUND_TRIPS`)."""
    # A block's first K/V step waits for its load: from device memory for one block of a group, from L2 for the
    # others when their shared K/V is served there (seconds per byte, averaged over the group's blocks).
    l2_rate = hw.shared_l2_read_bytes_per_s
    group = call.h / call.kvh
    hbm_s_per_byte = 1.0 / (hw.memory_bytes_per_s * hw.eff_memory)
    l2_s_per_byte = 1.0 / (l2_rate * hw.eff_memory) if l2_rate else 0.0
    shared_share = _num.where(per_head & in_cache, (group - 1.0) / group, 0.0)
    first_kv_s_per_byte = (1.0 - shared_share) * hbm_s_per_byte + shared_share * l2_s_per_byte
    io_s_per_byte: Num = hbm_s_per_byte
    if hw.warm_cache and l2_rate is not None and l2_rate > hw.memory_bytes_per_s:
        # A warm-cache scope (`Hardware.warm_cache`): a call whose Q, K, V and output fit in L2 waits on L2 for its
        # tiles too, as `roofline._kernels.single` serves its bytes from there.
        out_bytes = call.s * call.b * call.h * call.q * call.d
        warm = call.k_bytes + call.v_bytes + call.q_bytes + out_bytes <= hw.cache_bytes
        first_kv_s_per_byte = _num.where(warm, l2_s_per_byte, first_kv_s_per_byte)
        io_s_per_byte = _num.where(warm, l2_s_per_byte, hbm_s_per_byte)
    fa2 = call.implementation == "flash2"
    return FlashWaits(first_kv_s_per_byte, io_s_per_byte, FA2_KV_ROUND_TRIPS if fa2 else None)


def _swapped_layout_copies(hw: Hardware, call: _Call, swap: Bool) -> Kernel:
    """FlashAttention-2's swapped decode hands its output and query back in the caller's layout."""
    # Each `.transpose(1, 2).reshape(...)` of a (batch, group, kv heads, d) tensor is a copy (flash_api.cpp,
    # mha_fwd's end), two more kernels that read and write b·h·d elements each.
    moved = _num.where(swap, 2.0 * call.q_bytes, 0.0)
    return Kernel(
        flops=0.0, matrix_s=0.0, vector_flops=0.0, sfu_ops=0.0, external_in_bytes=moved, chained_in_bytes=0.0,
        out_bytes=moved, peak=hw.vector_peak(call.dtype), unit="vector",
        launches=_num.where(swap, 2.0, 0.0),
        assumptions={"attention": call.implementation, "layout copies": "swapped decode's output and query"},
    )  # fmt: skip
