"""The tile schedule of a flash-attention kernel: thread blocks of query rows walking K/V blocks, split keys, and
TensorRT-LLM's XQA decode kernel's own split and in-kernel merge."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware
from roofline._num import Bool
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


# The records `flash_tiles` takes and its steps pass: slotted dataclasses, never changed once built, not frozen
# ones: a frozen dataclass sets each field through object.__setattr__, about four times the build time, and a point's
# estimate is a budget of microseconds (`roofline._num`).
@dataclass(slots=True)
class FlashShape:
    """An attention call's sizes: batch, query heads, K/V heads, head_dim, queries and keys."""

    batch: Num
    heads: Num
    kv_heads: Num
    head_dim: Num
    q_len: Num
    kv_len: Num


@dataclass(slots=True)
class FlashTile:
    """A flash kernel's tile: `rows` query rows against K/V blocks of `keys` keys, its mask (`causal`, a sliding
    `window` of keys: None, none) and whether the softmax of one block runs behind the products of the next
    (`warp_specialised`, per point)."""

    rows: Num
    keys: Num
    causal: bool
    window: Num | None = None
    warp_specialised: Bool = False


@dataclass(slots=True)
class FlashWaits:
    """What a wave waits at: seconds per byte of its first K/V block and of its query and output tiles (None:
    device memory's), and the memory latencies before a tile's first product (None: the paged cache's chain)."""

    first_kv_s_per_byte: Num | None = None
    io_s_per_byte: Num | None = None
    kv_round_trips: float | None = None


@dataclass(slots=True)
class _Grid:
    """A flash kernel's thread blocks: whether all query rows of a K/V head fit one tile (`packed`), the heads the
    grid spans (batch × query or K/V heads), a tile's query rows, query tiles per head, the K/V blocks of the longest
    thread block's walk and those of all thread blocks of one head."""

    packed: Bool
    heads: Num
    tile_rows: Num
    n_q: Num
    n_kv: Num
    blocks: Num


_Waits = tuple[Num, Num, Num, Num]  # `_wave_waits`
Schedule = Callable[[Num, Num], tuple[Num, Num, Num]]  # `_scheduler`
_FIGURES = ("seconds", "exposed_s", "kv_splits", "ctas", "launches")  # `flash_tiles`' figures


def flash_tiles(
    hw: Hardware,
    shape: FlashShape,
    tile: FlashTile,
    peak: float,
    s: float,
    waits: FlashWaits,
    splits: Num | None = None,
) -> dict[str, Num]:
    """The tile schedule of a flash-attention kernel of `shape` with `tile`, its inputs `s` bytes per element and its
    products at `peak` FLOP/s: its time on the compute units and their exposed waits, in seconds.

    A thread block owns `tile_rows` query rows of one head (or, for short queries, the rows of all h/kv_h heads
    that share a K/V head, as FlashDecoding and TensorRT-LLM's XQA pack them; never fewer than `MMA_ROWS`) and walks
    the K/V blocks of `tile.keys` keys, skipping those above a causal diagonal (Dao et al. 2022; FlashAttention-2, Dao
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
    `waits.first_kv_s_per_byte` and `waits.io_s_per_byte`: seconds per byte of a wave's first K/V block and of its
    query and output tiles (default: device memory's; a call served from a warm L2 passes the L2's).
    `waits.kv_round_trips`: the memory latencies before a tile's first product when K and V are not paged.

    `tile.warp_specialised` (per point): a Hopper-class prefill kernel (`hopper_prefill_tile`): the softmax of one
    block runs while the products of the next run, so a block costs the larger of the two, and a persistent grid's
    producer warp loads the next tile's Q, K and V while this one computes, so only the first wave waits for them.
    `splits`: the key splits a library's own rule gives (`fa2_splits`), taken as they are (no search, no XQA).

    A sliding `tile.window` (kv_len already cut to the keys some query sees, `window_keys`): a tile of P query
    positions walks only the blocks of its band, the P + w − 1 keys from its first row's window to its last row, and
    meets a block edge half a block on average at each end (as the causal diagonal): P + w − 1 keys / block + 1/2
    blocks.
    """
    grid = _grid(shape, tile)
    per_block = _block_s(hw, grid.tile_rows, tile, shape.head_dim, peak)
    decode = grid.packed & (shape.q_len == 1.0)  # one new token per sequence against its cache
    xqa = decode & (shape.heads / shape.kv_heads > 1.0) & (splits is None)  # masked MHA comes here with kvh = h
    point = _num.is_point(per_block, grid.blocks, grid.heads)
    xp = _num.FLOATS if point else _num.ARRAYS  # the split search runs these many times
    wait = _wave_waits(hw, shape, tile, s, waits, decode, xqa)
    schedule = _scheduler(hw, shape, tile, grid, per_block, s, wait, xp)
    if splits is not None:
        return _library_split(hw, schedule, splits)
    out = _fastest_split(hw, schedule, grid, per_block, xp, search=not (point and xqa))
    if not point or xqa:
        out = _with_xqa_split(hw, schedule, shape, grid, xqa, out)
    return out


def _grid(shape: FlashShape, tile: FlashTile) -> _Grid:
    """The thread blocks: a tile's query rows (packed across the heads of a K/V head for short queries), the query
    tiles and the K/V blocks they walk."""
    b, h, kvh, q, kv = shape.batch, shape.heads, shape.kv_heads, shape.q_len, shape.kv_len
    block = tile.rows
    group = h / kvh
    rows = q * group
    packed = rows <= block  # all query rows of a K/V head fit one tile
    heads_per_grid = _num.where(packed, b * kvh, b * h)
    tile_rows = _num.minimum(block, _num.ceil(_num.where(packed, rows, q) / MMA_ROWS) * MMA_ROWS)
    positions = _num.where(packed, q, tile_rows)  # query positions one tile covers
    n_q = _num.ceil(q / positions)
    blocks, n_kv = _kv_blocks(q, kv, tile, positions, n_q)
    return _Grid(packed, heads_per_grid, tile_rows, n_q, n_kv, blocks)


def _kv_blocks(q: Num, kv: Num, tile: FlashTile, positions: Num, n_q: Num) -> tuple[Num, Num]:
    """K/V blocks all `n_q` query tiles of a head walk, and the longest one's walk, skipping those above a causal
    diagonal or outside a window's band."""
    kv_block = tile.keys
    n_kv = _num.ceil(kv / kv_block)
    if not tile.causal:
        return n_q * n_kv, n_kv
    first = kv - q  # keys every query sees
    blocks = n_q * first / kv_block + positions * n_q * (n_q + 1.0) / (2.0 * kv_block) + n_q / 2.0
    blocks = _num.minimum(_num.maximum(blocks, n_q), n_q * n_kv)  # np.clip's order: the lower bound, then the upper
    if tile.window is not None:
        band = _num.minimum(positions + _num.num(tile.window) - 1.0, kv)
        blocks = _num.minimum(blocks, n_q * (band / kv_block + 0.5))
        n_kv = _num.minimum(n_kv, _num.ceil(band / kv_block) + 1.0)  # the longest thread block's walk
    return blocks, n_kv


def _block_s(hw: Hardware, tile_rows: Num, tile: FlashTile, head_dim: Num, peak: float) -> Num:
    """Seconds of one K/V block on every slot at once: its two products and its online softmax, in series or, warp
    specialised, the larger of the two."""
    slots = hw.units * hw.concurrent_tiles_per_unit
    # The online softmax runs on the fp32 accumulators of S = Q·Kᵀ whatever the input type (FlashAttention-2's
    # flash_fwd_kernel.h: acc_s is an ElementAccum = float fragment), so at the fp32 vector rate, not a packed one.
    vector_peak = hw.vector_peak("fp32")
    sfu = hw.special_function_ops_per_s or vector_peak / 4.0
    scores = tile_rows * tile.keys
    products = 4.0 * scores * head_dim / (peak * hw.eff_matmul)
    softmax = 5.0 * scores / (vector_peak * hw.eff_vector) + scores / (sfu * hw.eff_vector)
    return slots * _num.where(tile.warp_specialised, _num.maximum(products, softmax), products + softmax)


def _wave_waits(
    hw: Hardware, shape: FlashShape, tile: FlashTile, s: float, waits: FlashWaits, decode: Bool, xqa: Bool
) -> _Waits:
    """What each wave waits for before its first product: the latency chain to its first K/V page (seconds), the
    bytes of its first K/V block, and the seconds per byte of that block and of its query and output tiles."""
    bw = hw.memory_bytes_per_s * hw.eff_memory
    latency = hw.memory_latency_s or 0.0
    page_wait = _num.where(xqa, XQA_KV_ROUND_TRIPS, _num.where(decode, PAGED_KV_ROUND_TRIPS, CONTEXT_KV_ROUND_TRIPS))
    page_wait = (page_wait if waits.kv_round_trips is None else waits.kv_round_trips) * latency
    first_kv = 2.0 * _num.minimum(tile.keys, shape.kv_len) * shape.head_dim * s
    kv_s_per_byte = 1.0 / bw if waits.first_kv_s_per_byte is None else waits.first_kv_s_per_byte
    io = 1.0 / bw if waits.io_s_per_byte is None else waits.io_s_per_byte  # a tile's query rows in and output out
    return page_wait, first_kv, kv_s_per_byte, io


def _scheduler(
    hw: Hardware, shape: FlashShape, tile: FlashTile, grid: _Grid, per_block: Num, s: float, wait: _Waits,
    xp: _num.Ops,
) -> Schedule:  # fmt: skip
    """The schedule of the grid with its keys split some number of ways, a function the split searches call."""
    b, h, d, q = shape.batch, shape.heads, shape.head_dim, shape.q_len
    heads_per_grid, tile_rows, n_q, n_kv, blocks = grid.heads, grid.tile_rows, grid.n_q, grid.n_kv, grid.blocks
    page_wait, first_kv, kv_s_per_byte, io = wait
    warp_specialised = tile.warp_specialised
    slots = hw.units * hw.concurrent_tiles_per_unit

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

    return schedule


def _library_split(hw: Hardware, schedule: Schedule, splits: Num) -> dict[str, Num]:
    """The schedule at the splits a library's own rule gives (`fa2_splits`), combined by a second kernel."""
    seconds, exposed, ctas = schedule(splits, hw.launch_s)
    launches = _num.where(splits > 1.0, 2.0, 1.0)
    return {"seconds": seconds, "exposed_s": exposed, "kv_splits": splits + _num.zeros_like(seconds),
            "ctas": ctas, "launches": launches + _num.zeros_like(seconds)}  # fmt: skip


def _fastest_split(
    hw: Hardware, schedule: Schedule, grid: _Grid, per_block: Num, xp: _num.Ops, search: bool
) -> dict[str, Num]:
    """The split of `SPLIT_K` with the least total (the first of equals), split only where the grid is under-filled;
    zeros where not `search`ed."""
    point = xp is _num.FLOATS
    shape = () if point else np.broadcast_shapes(*map(np.shape, (per_block, grid.blocks, grid.heads)))
    best: Num = math.inf if point else np.full(shape, np.inf)
    out: dict[str, Num] = {name: _num.zeros_like(best) for name in _FIGURES}
    if not search:
        return out
    underfilled = grid.heads * grid.n_q < hw.units * hw.concurrent_tiles_per_unit
    for split in SPLIT_K:
        seconds, exposed, ctas = schedule(float(split), hw.launch_s)
        if split > 1:
            exposed = xp.where(underfilled, exposed, math.inf)
        total = seconds + exposed
        better = total < best
        best = xp.where(better, total, best)
        launches = 2.0 if split > 1 else 1.0
        for name, value in (
            ("seconds", seconds), ("exposed_s", exposed), ("kv_splits", float(split)), ("ctas", ctas),
            ("launches", launches),
        ):  # fmt: skip
            out[name] = xp.where(better, value, out[name])
    return out


def _with_xqa_split(
    hw: Hardware, schedule: Schedule, shape: FlashShape, grid: _Grid, xqa: Bool, out: dict[str, Num]
) -> dict[str, Num]:
    """`out` where XQA's rule splits the keys (`XQA_KV_ROUND_TRIPS`' notes) and merges in the same kernel."""
    latency = hw.memory_latency_s or 0.0
    fill = -_num.ceil(-(hw.units / grid.heads))  # ⌊SMs / (batch · kv heads)⌋
    split_x = _num.minimum(_num.maximum(1.0, fill), _num.ceil(shape.kv_len / XQA_CTA_KEYS))
    # The last block's merge (`XQA_ROW_MAX_LOADS`): the semaphore, the row maxima, then each V warp group's tiles.
    warp_groups = XQA_WARPS / _num.minimum(_num.maximum(shape.head_dim / XQA_WARP_KEYS, 1.0), XQA_WARPS)
    tiles_each = _num.ceil(split_x / warp_groups)
    combine = 1.0 + _num.ceil(split_x / XQA_ROW_MAX_LOADS) + _num.ceil(tiles_each / XQA_TILE_BUFFERS)
    seconds, exposed, ctas = schedule(split_x, combine * latency)
    for name, value in (
        ("seconds", seconds), ("exposed_s", exposed), ("kv_splits", split_x), ("ctas", ctas), ("launches", 1.0),
    ):  # fmt: skip
        out[name] = _num.where(xqa, value, out[name])
    return out
