"""The iteration-time surface of one engine: what one scheduler iteration costs as a function of its mix, built
from vectorised calls of the inference core (`roofline.inference`) on grids and interpolated.

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
from dataclasses import dataclass, field, replace

import numpy as np

from roofline._hardware import dtype_bytes
from roofline._num import Array
from roofline.inference import InferenceRun
from roofline.inference._evaluation import P10, P90, TERMS, TIME, Evaluator
from roofline.inference._layers import LayerOps
from roofline.inference._phase import Pass, pass_time
from roofline.serving._config import Speculation

_OVERHEAD = TERMS.index("overhead_s")

ATTENTION_ROWS = ("attention", "attention_scores", "softmax", "attention_values")
HEAD_ROWS = ("lm_head", "final_norm")


def token_grid(limit: int) -> list[int]:
    """1 … 32 one by one, then about 6 % apart up to `limit` (matmul tile steps are 64 or 128 tokens wide: the
    interpolant spans at most a few of them)."""
    out = list(range(1, min(limit, 32) + 1))
    x = 32.0
    while out[-1] < limit:
        x *= 1.06
        out.append(min(limit, max(out[-1] + 1, round(x))))
    return out


def _geometric(first: float, last: float, points: int) -> list[float]:
    if last <= first:
        return [first]
    return [float(v) for v in np.unique(np.rint(np.geomspace(first, last, points)))]


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


def build_surface(run: InferenceRun, max_tokens: int, max_sequences: int, max_context: int,
                  graph_kernel_s: float | None = None) -> IterationSurface:  # fmt: skip
    """Evaluate the parts of an iteration on grids for one engine (`run`: model, system, parallelism, precision;
    its workload is ignored) up to `max_tokens` per pass, `max_sequences` decoding and `max_context` keys.
    `graph_kernel_s`: pure-decode iterations are CUDA-graph replays whose kernels each cost this fixed time instead
    of the profile's launch (`KERNEL_FLOOR_S`); None: every iteration runs eagerly."""
    ev = Evaluator()
    tokens = np.array(token_grid(max(max_tokens, max_sequences)), dtype=np.float64)
    # Decode attention steps with the waves of its CTAs over the SMs (sequences × KV heads, split along the keys):
    # every sequence count up to 512, then about 6 % apart.
    seqs = (
        np.array(token_grid(max(1, max_sequences)), dtype=np.float64)
        if max_sequences > 512
        else np.arange(1.0, max_sequences + 1.0)
    )
    ctx = np.array(_geometric(1.0, float(max_context), 32))
    chunk = np.array(_geometric(1.0, float(max_tokens), 64))
    cached = np.array([0.0, *_geometric(1.0, float(max_context), 24)])
    mla = run.model.mla is not None
    dummy = np.ones(1)

    def layer_pass(tok: Array, seq: Array, attn: tuple[Array, Array, Array], prefill: bool) -> Pass:
        ps = Pass(tok.size)
        ops = LayerOps(run, ev, ps, tokens=tok, attn=attn, sequences=seq, prefill=False)
        ops.prefill = prefill  # attention points stay one per sample; MLA's prefill form when asked
        ops.register()
        return ps

    body_pass = layer_pass(tokens, tokens, (dummy.repeat(tokens.size), dummy.repeat(tokens.size),
                                            dummy.repeat(tokens.size)), False)  # fmt: skip
    pre_body_pass = layer_pass(tokens, tokens, (dummy.repeat(tokens.size),) * 3, True) if mla else None
    dg_d, dg_c = np.meshgrid(seqs, ctx, indexing="ij")
    dec_pass = layer_pass(dg_d.ravel(), dg_d.ravel(), (dg_d.ravel(), np.ones(dg_d.size), dg_c.ravel()), False)
    pg_q, pg_c = np.meshgrid(chunk, cached, indexing="ij")
    pre_pass = layer_pass(
        pg_q.ravel(), np.ones(pg_q.size), (np.ones(pg_q.size), pg_q.ravel(), pg_q.ravel() + pg_c.ravel()), True
    )
    # Off-grid check points (midpoints of the grids), each a whole iteration evaluated by the core itself.
    mid_d = np.sqrt(seqs[:-1] * seqs[1:]) if seqs.size > 1 else seqs
    mid_c = np.sqrt(ctx[:-1] * ctx[1:]) if ctx.size > 1 else ctx
    md_d, md_c = (g.ravel() for g in np.meshgrid(mid_d[:: max(1, mid_d.size // 16)], mid_c, indexing="ij"))
    check_dec = layer_pass(md_d, md_d, (md_d, np.ones(md_d.size), md_c), False)
    mid_q = np.sqrt(chunk[:-1] * chunk[1:]) if chunk.size > 1 else chunk
    mq_q, mq_c = (g.ravel() for g in np.meshgrid(mid_q, np.sqrt(cached[1:-1] * cached[2:]), indexing="ij"))
    check_pre = layer_pass(mq_q, np.ones(mq_q.size), (np.ones(mq_q.size), mq_q, mq_q + mq_c), True)
    p = run.parallelism.pipeline
    send = (
        ev.collective(run.system, "send_recv", run.parallelism.tensor * p,
                      tokens * run.model.hidden * dtype_bytes(run.precision.activations), run.precision.activations)
        if p > 1 else None
    )  # fmt: skip
    ev.run()

    def assemble(term: int, central: IterationSurface | None = None) -> IterationSurface:
        """The surface of the op times in row `term` of the results (`TIME`, or a band's edge, whose CUDA-graph
        decode iteration is the `central` one's scaled by the edge's eager time over the central's)."""
        body_t, head_t, kernels = _split(body_pass, term)
        body = _Grid1(tokens.tolist(), body_t.tolist())
        head = _Grid1(tokens.tolist(), head_t.tolist())
        pre_body_t = None if pre_body_pass is None else _split(pre_body_pass, term)[0]
        prefill_body = body if pre_body_t is None else _Grid1(tokens.tolist(), pre_body_t.tolist())
        dec_t = _attention(dec_pass, term)[0].reshape(dg_d.shape)
        decode_attention = _Grid2(seqs.tolist(), ctx.tolist(), dec_t.tolist())
        pre_t, pre_fixed = _attention(pre_pass, term)
        fixed = float(pre_fixed.max()) if pre_fixed.size else 0.0
        prefill_attention = _Grid2(chunk.tolist(), cached.tolist(), (pre_t - pre_fixed).reshape(pg_q.shape).tolist())
        sends = ((p - 1) * send.seconds(term)).tolist() if send is not None else [0.0] * tokens.size
        send_s = _Grid1(tokens.tolist(), sends)
        decode_fixed = body_t + head_t + np.asarray(send_s.y)
        launch = run.system.hardware.launch_s
        if central is not None and central.decode_body is not None:
            eager = np.asarray(central.body.y) + np.asarray(central.head.y) + np.asarray(central.send_s.y)
            decode_fixed = np.asarray(central.decode_body.y) * np.divide(
                decode_fixed, eager, out=np.ones_like(eager), where=eager > 0
            )
        elif graph_kernel_s is not None and graph_kernel_s < launch:
            # Each kernel's fixed cost (the `overhead_s` term: launches × the profile's launch cost) becomes the
            # graph's.
            attention_fixed = _attention(dec_pass, term)[1].reshape(dg_d.shape).mean(axis=1)
            over = _overheads(body_pass) + attention_fixed[np.clip(np.searchsorted(seqs, tokens), 0, seqs.size - 1)]
            decode_fixed = decode_fixed - over * (1.0 - graph_kernel_s / launch)
        return IterationSurface(
            body, prefill_body, head, decode_attention, prefill_attention, fixed, kernels, 0.0, send_s,
            _Grid1(tokens.tolist(), decode_fixed.tolist()), layers=float(run.model.layers),
        )  # fmt: skip

    surface = assemble(TIME)
    if run.system.intervals is not None:
        surface = replace(surface, band=(assemble(P10, surface), assemble(P90, surface)))
    # The interpolant at the off-grid check points, all at once: a pure decode pass without a graph body
    # (`decode_time` less the sends) and one prefill chunk alone (`time` less the sends).
    core_dec = pass_time(check_dec.totals())
    d_at, c_at = np.asarray(md_d, dtype=np.float64), np.asarray(md_c, dtype=np.float64)
    mine_dec = surface.body.at(d_at) + surface.head.at(d_at) + surface.decode_attention.at(d_at, c_at)
    err_dec = np.abs(mine_dec - core_dec) / core_dec
    core_pre = pass_time(check_pre.totals())
    q_at, qc_at = np.asarray(mq_q, dtype=np.float64), np.asarray(mq_c, dtype=np.float64)
    mine_pre = (surface.prefill_body.at(q_at) + surface.head(1.0) + surface.attention_fixed_s
                + surface.prefill_attention.at(q_at, qc_at))  # fmt: skip
    err_pre = np.abs(mine_pre - core_pre) / core_pre
    return replace(surface, error=float(max(err_dec.max(initial=0.0), err_pre.max(initial=0.0))))


def _split(ps: Pass, term: int = TIME) -> tuple[Array, Array, float]:
    """(body seconds, LM-head seconds, kernels per pass) per sample of a pass, from row `term` of its results."""
    body = np.zeros(ps.samples)
    head = np.zeros(ps.samples)
    kernels = 0.0
    for name, (values, calls) in ps.totals().items():
        kernels += calls
        if name in HEAD_ROWS:
            head += values[term]
        elif name not in ATTENTION_ROWS:
            body += values[term]
    return body, head, kernels


def _overheads(ps: Pass) -> Array:
    """Fixed costs (launches × launch cost) of a pass's kernels but attention's, per sample; collectives have
    none."""
    out = np.zeros(ps.samples)
    for name, (values, _) in ps.totals().items():
        if name not in ATTENTION_ROWS:
            out += values[_OVERHEAD]
    return out


def _attention(ps: Pass, term: int = TIME) -> tuple[Array, Array]:
    """(attention seconds, of which fixed kernel costs) per sample of a pass, from row `term` of its results (a
    band's edge moves the fixed costs with the rest: the band is on the whole time)."""
    totals = ps.totals()
    t = np.zeros(ps.samples)
    central = np.zeros(ps.samples)
    fixed = np.zeros(ps.samples)
    for name in ATTENTION_ROWS:
        if name in totals:
            t += totals[name][0][term]
            central += totals[name][0][TIME]
            fixed += totals[name][0][_OVERHEAD]
    if term != TIME:
        fixed = fixed * np.divide(t, central, out=np.ones_like(t), where=central > 0)
    return t, fixed
