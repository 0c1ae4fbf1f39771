"""The iteration-time surface of one engine: what one scheduler iteration costs as a function of its mix, built
from vectorised calls of the inference core (`roofline.inference`) on grids (`roofline.serving._surface_build`) and
interpolated.

An iteration of an in-flight-batching engine (vLLM, TensorRT-LLM, SGLang) is one forward pass over every token it
schedules: each decoding sequence's new token and each prefill chunk. Its cost splits into parts that depend on
different quantities of the mix:

- the body: every op but attention and the LM head (projections, FFN or experts, norms, the tensor-parallel
  all-reduces, the expert all-to-alls), a function of the pass's tokens N = prefill tokens + decode sequences;
- the LM head and final norm, on the S sequences that sample a token (decoding ones and prefills that finish);
- decode attention: D sequences of one query each over their cached keys, a function of D and the mean context
  (FlashDecoding-style kernels split the keys; TensorRT-LLM's XQA, vLLM's paged attention);
- prefill attention: each chunk of q new tokens over its c cached and q new keys, causal (vLLM's chunked prefill,
  Sarathi-Serve, Agrawal et al. 2024 §4).

With speculative decoding (`Speculation`), a decoding sequence puts k + 1 positions through the body and the LM
head, reads its keys once, and its draft adds k steps of `draft_layers` layers' share of the body and attention and
the LM head over one position.

Each part is evaluated by the core on a grid (tokens, sequences × context, chunk × cached context) in one
`Evaluator` run and interpolated linearly between grid points; fixed kernel costs of attention are counted once per
iteration, not once per sequence. `IterationSurface.error` is the largest relative difference between the
interpolant and the core at off-grid points, evaluated in the same run.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from roofline._num import Array
from roofline.serving._config import Speculation


@dataclass(frozen=True)
class _Grid1:
    x: list[float]
    y: list[float]

    def __call__(self, v: float) -> float:
        x, y = self.x, self.y
        if v <= x[0]:
            return y[0] * v / x[0] if x[0] > 0 and v < x[0] else y[0]
        i = bisect_right(x, v) - 1
        if i >= len(x) - 1:  # beyond the grid: linear in the last segment
            i = len(x) - 2
            if i < 0:
                return y[0]
        x0, x1 = x[i], x[i + 1]
        return y[i] + (y[i + 1] - y[i]) * (v - x0) / (x1 - x0)

    def at(self, v: Array) -> Array:
        """`__call__` at every point of `v` at once (the surface's error check)."""
        x, y, v = np.asarray(self.x), np.asarray(self.y), np.asarray(v, dtype=np.float64)
        below = np.where((x[0] > 0) & (v < x[0]), y[0] * v / (x[0] if x[0] > 0 else 1.0), y[0])
        if x.size == 1:
            alone: Array = np.where(v <= x[0], below, y[0])
            return alone
        i = np.clip(np.searchsorted(x, v, side="right") - 1, 0, x.size - 2)
        inside = y[i] + (y[i + 1] - y[i]) * (v - x[i]) / (x[i + 1] - x[i])
        out: Array = np.where(v <= x[0], below, inside)
        return out


@dataclass(frozen=True)
class _Grid2:
    """Bilinear in (a, b) over a rectangular grid; linear extrapolation in b beyond its last point."""

    a: list[float]
    b: list[float]
    z: list[list[float]]  # z[i][j] at (a[i], b[j])

    def __call__(self, va: float, vb: float) -> float:
        # `_locate` inlined for both axes: this runs once or twice per simulated iteration.
        a, b, z = self.a, self.b, self.z
        if len(b) == 1:
            if len(a) == 1:
                return z[0][0]
            ia, ta = _locate(a, va)
            return z[ia][0] + (z[ia + 1][0] - z[ia][0]) * ta
        if vb <= b[0]:
            ib, tb = 0, 0.0
        else:
            ib = bisect_right(b, vb) - 1
            if ib > len(b) - 2:
                ib = len(b) - 2
            tb = (vb - b[ib]) / (b[ib + 1] - b[ib])
        if len(a) == 1:
            return z[0][ib] + (z[0][ib + 1] - z[0][ib]) * tb
        if va <= a[0]:
            ia, ta = 0, 0.0
        else:
            ia = bisect_right(a, va) - 1
            if ia > len(a) - 2:
                ia = len(a) - 2
            ta = (va - a[ia]) / (a[ia + 1] - a[ia])
        z0, z1 = z[ia], z[ia + 1]
        r0 = z0[ib] + (z0[ib + 1] - z0[ib]) * tb
        return r0 + (z1[ib] + (z1[ib + 1] - z1[ib]) * tb - r0) * ta

    def at(self, va: Array, vb: Array) -> Array:
        """`__call__` at every pair of `va`, `vb` at once (the surface's error check)."""
        z = np.asarray(self.z, dtype=np.float64)
        ia, ta = _locate_many(np.asarray(self.a), np.asarray(va, dtype=np.float64))
        ib, tb = _locate_many(np.asarray(self.b), np.asarray(vb, dtype=np.float64))
        ia1, ib1 = np.minimum(ia + 1, z.shape[0] - 1), np.minimum(ib + 1, z.shape[1] - 1)
        r0 = z[ia, ib] + (z[ia, ib1] - z[ia, ib]) * tb
        r1 = z[ia1, ib] + (z[ia1, ib1] - z[ia1, ib]) * tb
        out: Array = r0 + (r1 - r0) * ta
        return out


def along(x: list[float], y: list[float], v: float) -> float:
    """`y` over `x` at `v`: linear between points, clamped below the first, extrapolated past the last (a row of
    `_Grid2`)."""
    if len(x) == 1 or v <= x[0]:
        return y[0]
    i = bisect_right(x, v) - 1
    if i > len(x) - 2:
        i = len(x) - 2
    return y[i] + (y[i + 1] - y[i]) * (v - x[i]) / (x[i + 1] - x[i])


def _locate_many(x: Array, v: Array) -> tuple[np.ndarray, Array]:
    """`_locate` at every point of `v`: segment indices and fractions (0 on a one-point axis)."""
    if x.size == 1:
        return np.zeros(v.shape, dtype=np.intp), np.zeros(v.shape)
    i = np.clip(np.searchsorted(x, v, side="right") - 1, 0, x.size - 2)
    t = np.where(v <= x[0], 0.0, (v - x[i]) / (x[i + 1] - x[i]))
    return i, t


def _locate(x: list[float], v: float) -> tuple[int, float]:
    """Segment index and fraction along it (clamped below the grid, extrapolated above)."""
    if len(x) == 1:
        return 0, 0.0
    if v <= x[0]:
        return 0, 0.0
    i = min(bisect_right(x, v) - 1, len(x) - 2)
    return i, (v - x[i]) / (x[i + 1] - x[i])


@dataclass(frozen=True)
class IterationSurface:
    """Seconds of one iteration of an engine, by part (see the module's docstring). `kernels` is the kernel count
    of one pass (for the host's launch bound without CUDA graphs); `error` the interpolant's largest relative error
    at the off-grid check points; `send_s` the pipeline's sends per iteration (p − 1 stage boundaries)."""

    body: _Grid1
    prefill_body: _Grid1
    head: _Grid1
    decode_attention: _Grid2  # (sequences, mean context) → seconds of the whole batch's decode attention
    prefill_attention: _Grid2  # (chunk tokens, cached tokens) → seconds of one chunk's attention, fixed costs out
    attention_fixed_s: float
    kernels: float
    error: float
    send_s: _Grid1
    # A pure-decode iteration's body, LM head and sends in one interpolant (the simulator's hot path), its kernels'
    # fixed costs those of a CUDA-graph replay when built with `graph_kernel_s`; None: the parts above, summed.
    decode_body: _Grid1 | None = None
    # The surfaces of the ops' times at their prediction bands' lower and upper edges (`roofline.intervals`; None:
    # built without an interval table).
    band: tuple[IterationSurface, IterationSurface] | None = None
    layers: float = 1.0  # decoder layers in `body` (a draft layer's share of it)
    # `decode_row`'s rows, by batch size (filled as the simulator meets them)
    _rows: dict[int, tuple[float, list[float], list[float]]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def time(self, prefill_tokens: float, chunks: list[tuple[float, float]], decode: float, context: float,
             sampled: float, spec: Speculation | None = None) -> float:  # fmt: skip
        """One iteration: `chunks` (q new tokens, c cached) of prefills, `decode` sequences whose keys sum to
        `context`, `sampled` positions through the LM head; with `spec`, each decoding sequence's k + 1 positions
        are verified and its k drafts made (`draft_time`)."""
        width = 1.0 if spec is None else float(spec.width)
        n = prefill_tokens + decode * width
        t = (self.prefill_body(n) if prefill_tokens > 0 else self.body(n)) + self.head(max(sampled, 1.0))
        if decode > 0:
            row = self._rows.get(int(decode)) if decode == int(decode) else None
            if row is not None:  # the batch size's row, where the simulator has built it (`decode_row`)
                attention = along(row[1], row[2], context / decode)
            else:
                attention = self.decode_attention(decode, context / decode)
            t += attention
            if spec is not None:
                t += self.draft_time(decode, attention, spec, graph=False)
        if chunks:
            t += self.attention_fixed_s
            for q, c in chunks:
                t += self.prefill_attention(q, c)
        return t + self.send_s(n)

    @staticmethod
    def flat(seconds: float) -> IterationSurface:
        """Every iteration takes `seconds`, whatever its mix: a what-if, and a schedule one can follow by hand."""
        zero = _Grid1([1.0, 2.0], [0.0, 0.0])
        return IterationSurface(
            _Grid1([1.0, 2.0], [seconds, seconds]), _Grid1([1.0, 2.0], [seconds, seconds]), zero,
            _Grid2([1.0], [1.0], [[0.0]]), _Grid2([1.0], [1.0], [[0.0]]), 0.0, 1.0, 0.0, zero,
        )  # fmt: skip

    def decode_time(self, decode: float, context: float, spec: Speculation | None = None) -> float:
        """A pure decode iteration (the hot path of the simulator), replayed as a CUDA graph when the surface was
        built with `graph_kernel_s`. With `spec`: the target's pass over k + 1 positions per sequence (each
        sequence's keys read once: the engines' multi-token decode attention, FlashInfer and TensorRT-LLM's XQA,
        score all k + 1 queries of a sequence against one read of its cache) and the k draft steps."""
        if spec is None and self.decode_body is not None:  # the hot path: the batch size's row (`decode_row`)
            row = self.decode_row(int(decode)) if decode == int(decode) else None
            if row is not None:
                return row[0] + along(row[1], row[2], context / decode)
            return self.decode_body(decode) + self.decode_attention(decode, context / decode)
        n = decode if spec is None else decode * spec.width
        attention = self.decode_attention(decode, context / decode)
        t = self._pass(n) + attention
        if spec is not None:
            t += self.draft_time(decode, attention, spec)
        return t

    def decode_row(self, decode: int) -> tuple[float, list[float], list[float]] | None:
        """A pure decode iteration of `decode` sequences as the simulator's hot path reads it: the body's seconds,
        and the attention's seconds at the context grid's points (the bilinear interpolant's row at that batch size,
        built once per size), so that `decode_time(decode, c)` = body + the row at c / decode, linear between points,
        clamped below the first and extrapolated past the last. None where `decode_time` takes another path (no
        CUDA-graph body)."""
        row = self._rows.get(decode)
        if row is not None or self.decode_body is None:
            return row
        grid = self.decode_attention
        a, b, z = grid.a, grid.b, grid.z
        if len(a) == 1:
            ys = list(z[0])
        else:
            ia, ta = _locate(a, float(decode))
            z0, z1 = z[ia], z[ia + 1]
            ys = [z0[j] + (z1[j] - z0[j]) * ta for j in range(len(b))]
        row = (self.decode_body(float(decode)), list(b), ys)
        self._rows[decode] = row
        return row

    def _pass(self, n: float, graph: bool = True) -> float:
        """A pure-decode pass's body, LM head and sends over `n` positions."""
        if graph and self.decode_body is not None:
            return self.decode_body(n)
        return self.body(n) + self.head(n) + self.send_s(n)

    def draft_time(self, decode: float, attention: float, spec: Speculation, graph: bool = True) -> float:
        """The k draft steps of an iteration: each runs `draft_layers` decoder layers of the target's shapes (their
        share of the body and of the sequences' decode `attention`) and the LM head over one position per sequence."""
        share = spec.draft_layers / self.layers
        head = self.head(decode)
        step = share * (self._pass(decode, graph) - head + attention) + head
        return spec.draft_tokens * step
