"""The tile search a library runs to pick a matrix product's output tiles (and split k), vectorised over shapes:
every candidate costed as whole waves of tiles over the device's compute units."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware
from roofline._kernels import arr

# Matmul tiles are the output tiles a library picks among; waves are rounds of tiles over the compute units
# (NVIDIA, "Matrix Multiplication Background", dimension quantization; seed 002's 1792 → 1793 example).

# Split-K: when an m × n output has fewer tiles than the device has slots, one wave leaves units idle and each
# busy unit walks the whole k loop. Libraries then split k into s slices computed by separate thread blocks and sum
# the fp32 partial tiles in a second kernel (CUTLASS "split-K" / "stream-K"; cuBLAS picks split-K for small m·n
# with large k). Only under-filled grids are split (a full wave gains nothing and pays the reduction); among the
# splits the cheapest wins, each slice paying its own pipeline fill (`K_STEP`), so shallow slices lose by cost
# rather than by a cut-off, and the time never falls as k grows.
SPLIT_K = (1, 2, 4, 8, 16, 32, 64)
_SPLITS = np.asarray(SPLIT_K, dtype=np.float64)
_SEARCH_CHUNK = 512  # points per step of the tile search: its (candidate, split, point) grid stays in a 2 MiB L2
PARTIAL_BYTES = 4.0  # fp32 partial sums
_BOUND_MARGIN = 1.0 - 1e-12  # a lower bound's rounding (a few ulps, ~1e-15 relative) stays below this

# What a tile cannot overlap with its math: a thread block first waits for its first k-step of A and B to arrive
# (its software pipeline starts empty) and stores its output tile only after its last k-step (Ampere GEMM kernels
# are not persistent: the next tile on that unit starts after the store). Both transfers share device bandwidth
# with the other active tiles, so each wave keeps the compute units waiting for
# ((tm + tn)·K_STEP·size(in) + tm·tn·size(out)) · active tiles / bandwidth. K_STEP is the k depth of one pipeline
# stage (32 or 64 in cuBLAS's and CUTLASS's sm80 16-bit kernels: "…_stages_32x5…", "…_stages_64x3…"; CUTLASS,
# "Efficient GEMM in CUDA": threadblock tile, software pipelining). This is what makes a k = 128 GEMM twice as slow
# as its FLOPs and bytes say, and why the last wave of a large GEMM costs more than its share of the math.
K_STEP = 32


class TileSearch:
    """The tile and split a library picks for the output tiles of a matmul on one device: every (candidate tile,
    `SPLIT_K` split) pair costed as whole waves of tiles over the device's slots, the least total of math and exposed
    time taken, the first of equals (a library heuristic's pick)."""

    def __init__(
        self, hw: Hardware, peak: float, s_in: float, s_out: float, pairs: list[tuple[int, int]],
        splits: tuple[int, ...] = SPLIT_K, k_tile: float = 0.0, s_weight: float | None = None,
    ) -> None:  # fmt: skip
        self.launch_s, self.peak, self.s_in, self.s_out, self.pairs = hw.launch_s, peak, s_in, s_out, pairs
        self.s_weight = s_in if s_weight is None else s_weight
        # A product whose main loop waits `step_s` per `k_tile`-deep k-tile (a block-scaled fp4 product); 0: none.
        self.k_tile, self.step_s = k_tile, (hw.block_scaled_step_s if k_tile > 0.0 else 0.0)
        self.splits, self.split_grid = splits, np.asarray(splits, dtype=np.float64)
        self.slots = hw.units * hw.concurrent_tiles_per_unit
        self.bw = hw.memory_bytes_per_s * hw.eff_memory
        # A warm scope (`Hardware.warm_cache`, or `warm_operands` for products): a product whose operands and output
        # fit in the last-level cache finds its first k-step there and stores its tiles there (NVIDIA's L2 is the
        # point of coherence and writes back: a store completes in L2), so a wave's exposed traffic moves at the
        # L2's rate, as its memory time does (`roofline._kernels._warm`); never slower than device memory.
        l2 = hw.shared_l2_read_bytes_per_s
        warm = (hw.warm_cache or hw.warm_operands) and l2 is not None and l2 > hw.memory_bytes_per_s
        self.cache_bytes = hw.cache_bytes if warm else 0.0  # 0: the waits stay at device memory's rate
        self.warm_bw = max(self.bw, (l2 or 0.0) * hw.eff_memory)

    def exposed_bandwidth(self, m: Num, n: Num, k: Num, b: Num, xp: _num.Ops) -> Num:
        """The rate a wave's first k-step and tile stores move at: the L2's where the product fits in a warm scope
        (`__init__`), device memory's otherwise."""
        if self.cache_bytes <= 0.0:
            return self.bw
        size = b * (self.s_in * m * k + self.s_weight * k * n + self.s_out * m * n)
        return xp.where(size <= self.cache_bytes, self.warm_bw, self.bw)

    @staticmethod
    def output_tiles(tm: Num, tn: Num, m: Num, n: Num, b: Num, xp: _num.Ops) -> Num:
        return b * xp.ceil(m / tm) * xp.ceil(n / tn)

    def partial_sums_s(self, split: Num, m: Num, n: Num, b: Num) -> Num:
        """The second kernel of a split: it reads and writes the split's fp32 partial outputs."""
        return 2.0 * PARTIAL_BYTES * split * b * m * n / self.bw

    def cost(
        self, tm: Num, tn: Num, split: Num, m: Num, n: Num, k: Num, b: Num, eff: Num, xp: _num.Ops
    ) -> tuple[Num, Num, Num, Num]:
        """Work units, waves, math time and exposed time of tm × tn output tiles over k split `split` ways."""
        slots, s_in = self.slots, self.s_in
        bw = self.exposed_bandwidth(m, n, k, b, xp)
        out_tiles = self.output_tiles(tm, tn, m, n, b, xp)
        depth = xp.ceil(k / split)
        tiles = out_tiles * split
        waves = xp.ceil(tiles / slots)
        # One wave: every slot computes a tm × tn tile over its k slice (2·tm·tn·depth FLOPs) at peak / slots, and
        # never faster than its k-tiles' waits.
        seconds = waves * slots * 2.0 * tm * tn * depth / (self.peak * eff)
        if self.step_s > 0.0:
            seconds = xp.maximum(seconds, waves * xp.ceil(depth / self.k_tile) * self.step_s)
        is_split = split > 1
        out_size = xp.where(is_split, PARTIAL_BYTES, self.s_out)
        tile_bytes = (tm + tn) * xp.minimum(depth, K_STEP) * s_in + tm * tn * out_size
        exposed = waves * tile_bytes * xp.minimum(tiles, slots) / bw
        # Split: the partial tiles are summed by a second kernel (`launches`), which reads and writes them; only an
        # under-filled grid is split.
        seconds = xp.where(is_split, seconds + self.partial_sums_s(split, m, n, b), seconds)
        exposed = xp.where(is_split, xp.where(out_tiles < slots, exposed + self.launch_s, math.inf), exposed)
        return tiles, waves, seconds, exposed

    def pick(self, m: Num, n: Num, k: Num, b: Num, eff: Num, point: bool) -> tuple[Num, Num, Num]:
        """The winner's tile rows, tile columns and split, per point: floats for one point (`roofline._num`)."""
        pairs = self.pairs
        shape = () if point else np.broadcast_shapes(np.shape(m), np.shape(n), np.shape(k), np.shape(b))
        size = math.prod(shape)
        pick: int | NDArray[np.intp]
        if point:
            pick = self.fastest_point(m, n, k, b, eff)
        elif size <= _SEARCH_CHUNK:
            pick = self.fastest(shape, m, n, k, b, eff)
        else:  # chunks of points, so that the grid's temporaries stay in cache (twice as fast at 10 000 points)
            flat = [np.broadcast_to(x, shape).reshape(-1) for x in (m, n, k, b, eff)]
            chunks = [(i, min(i + _SEARCH_CHUNK, size)) for i in range(0, size, _SEARCH_CHUNK)]
            pick = np.concatenate([self.fastest((j - i,), *(x[i:j] for x in flat)) for i, j in chunks]).reshape(shape)
        if point:
            choice_at, split_at = divmod(int(pick), len(self.splits))
            return float(pairs[choice_at][0]), float(pairs[choice_at][1]), float(self.splits[split_at])
        candidates = np.asarray(pairs, dtype=np.float64)
        choice, split_index = np.divmod(pick, len(self.splits))
        return arr(candidates[choice, 0]), arr(candidates[choice, 1]), arr(self.split_grid[split_index])

    def fastest(self, grid_shape: tuple[int, ...], *sizes: Num) -> NDArray[np.intp]:
        """Index of the first least total over every (candidate, split) pair, a library's pick, as c·splits + s: the
        pairs on two leading axes, the points (`sizes`: m, n, k, b, eff, broadcasting to `grid_shape`) after them."""
        candidates = np.asarray(self.pairs, dtype=np.float64)
        ones = (1,) * len(grid_shape)
        tm, tn = candidates[:, 0].reshape(-1, 1, *ones), candidates[:, 1].reshape(-1, 1, *ones)
        m, n, k, b, eff = sizes
        splits = self.split_grid.reshape(1, -1, *ones)
        _, _, grid_s, grid_exposed = self.cost(tm, tn, splits, m, n, k, b, eff, _num.ARRAYS)
        total = np.broadcast_to(grid_s + grid_exposed, (len(candidates), len(self.splits), *grid_shape))
        out: NDArray[np.intp] = np.argmin(total.reshape(len(candidates) * len(self.splits), -1), axis=0)
        return out.reshape(grid_shape)

    def fastest_point(self, m: Num, n: Num, k: Num, b: Num, eff: Num) -> int:
        """`fastest` for one point in floats: the first least total over the same (candidate, split) pairs. A split
        is considered only where the grid is under-filled (elsewhere `cost` makes it infinite, never the least).

        Pairs that cannot win are not costed (branch and bound): every pair computes at least its output tiles'
        whole k loop, work = out_tiles·2·tm·tn·k / (peak·eff) (waves·slots ≥ tiles, split·⌈k/split⌉ ≥ k), and a
        split adds its second launch and its partial sums, which grow with the split. A bound at or above the best
        total so far rules the pair out, and for a split every deeper one; candidates are visited by increasing
        work, so the best is found early. `_BOUND_MARGIN` keeps rounding from lifting a bound above the total it
        bounds, so a pair ruled out is strictly slower, and ties go to the first pair in the grid's order."""
        pairs, peak, slots = self.pairs, self.peak, self.slots
        works = []
        for tm, tn in pairs:
            out_tiles = self.output_tiles(tm, tn, m, n, b, _num.FLOATS)
            works.append((out_tiles * 2.0 * tm * tn * k / (peak * eff) * _BOUND_MARGIN, out_tiles))
        best_at, best_total = 0, math.inf
        for c in sorted(range(len(pairs)), key=lambda c: works[c][0]):
            (tm, tn), (work, out_tiles) = pairs[c], works[c]
            if work >= best_total:
                break  # and every later candidate: its work is no less
            for s, split in enumerate(self.splits if out_tiles < slots else self.splits[:1]):
                if s and work + (self.launch_s + self.partial_sums_s(split, m, n, b)) * _BOUND_MARGIN >= best_total:
                    break
                _, _, seconds, exposed = self.cost(tm, tn, split, m, n, k, b, eff, _num.FLOATS)
                total, at = float(seconds + exposed), c * len(self.splits) + s
                if total < best_total or (total == best_total and at < best_at):
                    best_at, best_total = at, total
        return best_at
