"""Building an engine's iteration-time surface (`roofline.serving._surface`): each part of an iteration evaluated
by the inference core on its grid in one `Evaluator` run, at the central time and at the ops' band edges, and the
interpolant's error at off-grid points evaluated in the same run."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from roofline._hardware import dtype_bytes
from roofline._num import Array
from roofline.inference import InferenceRun
from roofline.inference._evaluation import P10, P90, TERMS, TIME, CollectiveCall, Evaluator
from roofline.inference._layers import LayerOps
from roofline.inference._phase import Pass, pass_time
from roofline.serving._surface import IterationSurface, _Grid1, _Grid2

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


def build_surface(run: InferenceRun, max_tokens: int, max_sequences: int, max_context: int,
                  graph_kernel_s: float | None = None) -> IterationSurface:  # fmt: skip
    """Evaluate the parts of an iteration on grids for one engine (`run`: model, system, parallelism, precision;
    its workload is ignored) up to `max_tokens` per pass, `max_sequences` decoding and `max_context` keys.
    `graph_kernel_s`: pure-decode iterations are CUDA-graph replays whose kernels each cost this fixed time instead
    of the profile's launch (`KERNEL_FLOOR_S`); None: every iteration runs eagerly."""
    ev = Evaluator()
    grids = _grids(max_tokens, max_sequences, max_context)
    parts, checks = _register(run, ev, grids)
    ev.run()
    surface = _surface_at(run, grids, parts, TIME, graph_kernel_s)
    if run.system.intervals is not None:
        low, high = (_surface_at(run, grids, parts, term, graph_kernel_s, surface) for term in (P10, P90))
        surface = replace(surface, band=(low, high))
    return replace(surface, error=_interpolation_error(surface, checks))


@dataclass(frozen=True)
class _Grids:
    """Where the parts are evaluated: tokens per pass (the body, the LM head and the sends), decoding sequences ×
    mean context (decode attention) and chunk × cached tokens (prefill attention)."""

    tokens: Array
    seqs: Array
    ctx: Array
    chunk: Array
    cached: Array


@dataclass(frozen=True)
class _Parts:
    """The passes of an iteration's parts on the grids: the body and LM head, MLA's prefill form of the body (None:
    the body's), decode and prefill attention, and the pipeline's sends of a pass (None: one stage)."""

    body: Pass
    prefill_body: Pass | None
    decode_attention: Pass
    prefill_attention: Pass
    send: CollectiveCall | None


@dataclass(frozen=True)
class _Checks:
    """Whole passes at off-grid points (midpoints of the grids), evaluated by the core itself: decode passes at
    (sequences, mean context) and prefill chunks at (chunk, cached tokens)."""

    decode: Pass
    decode_at: tuple[Array, Array]
    prefill: Pass
    prefill_at: tuple[Array, Array]


def _grids(max_tokens: int, max_sequences: int, max_context: int) -> _Grids:
    """The grids up to the engine's largest pass, batch and context."""
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
    return _Grids(tokens, seqs, ctx, chunk, cached)


def _layer_pass(
    run: InferenceRun, ev: Evaluator, tok: Array, seq: Array, attn: tuple[Array, Array, Array], prefill: bool
) -> Pass:
    """A decoder layer's ops over `tok` tokens per sample, registered on `ev` (`LayerOps`)."""
    ps = Pass(tok.size)
    ops = LayerOps(run, ev, ps, tokens=tok, attn=attn, sequences=seq, prefill=False)
    ops.prefill = prefill  # attention points stay one per sample; MLA's prefill form when asked
    ops.register()
    return ps


def _register(run: InferenceRun, ev: Evaluator, grids: _Grids) -> tuple[_Parts, _Checks]:
    """Register on `ev` each part of an iteration on its grid, the check passes, then the pipeline's sends."""
    body, prefill_body, decode, prefill = _part_passes(run, ev, grids)
    checks = _check_passes(run, ev, grids)
    p = run.parallelism.pipeline
    send = (
        ev.collective(run.system, "send_recv", run.parallelism.tensor * p,
                      grids.tokens * run.model.hidden * dtype_bytes(run.precision.activations),
                      run.precision.activations)
        if p > 1 else None
    )  # fmt: skip
    return _Parts(body, prefill_body, decode, prefill, send), checks


def _part_passes(run: InferenceRun, ev: Evaluator, grids: _Grids) -> tuple[Pass, Pass | None, Pass, Pass]:
    """The body and LM head over tokens (and MLA's prefill body), decode attention over sequences × context and
    prefill attention over chunk × cached tokens."""
    tokens, dummy = grids.tokens, np.ones(1)
    body = _layer_pass(run, ev, tokens, tokens, (dummy.repeat(tokens.size), dummy.repeat(tokens.size),
                                                 dummy.repeat(tokens.size)), False)  # fmt: skip
    prefill_body = None
    if run.model.mla is not None:  # MLA's prefill form of the body
        prefill_body = _layer_pass(run, ev, tokens, tokens, (dummy.repeat(tokens.size),) * 3, True)
    dg_d, dg_c = np.meshgrid(grids.seqs, grids.ctx, indexing="ij")
    decode = _layer_pass(run, ev, dg_d.ravel(), dg_d.ravel(), (dg_d.ravel(), np.ones(dg_d.size), dg_c.ravel()), False)
    pg_q, pg_c = np.meshgrid(grids.chunk, grids.cached, indexing="ij")
    prefill = _layer_pass(
        run, ev, pg_q.ravel(), np.ones(pg_q.size), (np.ones(pg_q.size), pg_q.ravel(), pg_q.ravel() + pg_c.ravel()), True
    )
    return body, prefill_body, decode, prefill


def _check_passes(run: InferenceRun, ev: Evaluator, grids: _Grids) -> _Checks:
    """Register whole passes at the grids' midpoints (every 16th or so of the sequences), each a whole iteration the
    core evaluates itself."""
    seqs, ctx, chunk, cached = grids.seqs, grids.ctx, grids.chunk, grids.cached
    mid_d = np.sqrt(seqs[:-1] * seqs[1:]) if seqs.size > 1 else seqs
    mid_c = np.sqrt(ctx[:-1] * ctx[1:]) if ctx.size > 1 else ctx
    md_d, md_c = (g.ravel() for g in np.meshgrid(mid_d[:: max(1, mid_d.size // 16)], mid_c, indexing="ij"))
    decode = _layer_pass(run, ev, md_d, md_d, (md_d, np.ones(md_d.size), md_c), False)
    mid_q = np.sqrt(chunk[:-1] * chunk[1:]) if chunk.size > 1 else chunk
    mq_q, mq_c = (g.ravel() for g in np.meshgrid(mid_q, np.sqrt(cached[1:-1] * cached[2:]), indexing="ij"))
    prefill = _layer_pass(run, ev, mq_q, np.ones(mq_q.size), (np.ones(mq_q.size), mq_q, mq_q + mq_c), True)
    return _Checks(decode, (md_d, md_c), prefill, (mq_q, mq_c))


def _surface_at(
    run: InferenceRun, grids: _Grids, parts: _Parts, term: int, graph_kernel_s: float | None,
    central: IterationSurface | None = None,
) -> IterationSurface:  # fmt: skip
    """The surface of the op times in row `term` of the results (`TIME`, or a band's edge, whose CUDA-graph decode
    iteration is the `central` one's scaled by the edge's eager time over the central's)."""
    tokens = grids.tokens
    body_t, head_t, kernels = _split(parts.body, term)
    body = _Grid1(tokens.tolist(), body_t.tolist())
    head = _Grid1(tokens.tolist(), head_t.tolist())
    pre_body_t = None if parts.prefill_body is None else _split(parts.prefill_body, term)[0]
    prefill_body = body if pre_body_t is None else _Grid1(tokens.tolist(), pre_body_t.tolist())
    decode_attention, prefill_attention, fixed = _attention_grids(grids, parts, term)
    p = run.parallelism.pipeline
    sends = ((p - 1) * parts.send.seconds(term)).tolist() if parts.send is not None else [0.0] * tokens.size
    send_s = _Grid1(tokens.tolist(), sends)
    eager = body_t + head_t + np.asarray(send_s.y)
    decode_fixed = _decode_body_s(run, grids, parts, term, eager, graph_kernel_s, central)
    return IterationSurface(
        body, prefill_body, head, decode_attention, prefill_attention, fixed, kernels, 0.0, send_s,
        _Grid1(tokens.tolist(), decode_fixed.tolist()), layers=float(run.model.layers),
    )  # fmt: skip


def _attention_grids(grids: _Grids, parts: _Parts, term: int) -> tuple[_Grid2, _Grid2, float]:
    """Decode attention over (sequences, mean context), prefill attention over (chunk, cached) without its fixed
    kernel costs, and those costs, counted once per iteration."""
    dec_t = _attention(parts.decode_attention, term)[0].reshape(grids.seqs.size, grids.ctx.size)
    decode_attention = _Grid2(grids.seqs.tolist(), grids.ctx.tolist(), dec_t.tolist())
    pre_t, pre_fixed = _attention(parts.prefill_attention, term)
    fixed = float(pre_fixed.max()) if pre_fixed.size else 0.0
    pre = (pre_t - pre_fixed).reshape(grids.chunk.size, grids.cached.size)
    return decode_attention, _Grid2(grids.chunk.tolist(), grids.cached.tolist(), pre.tolist()), fixed


def _decode_body_s(
    run: InferenceRun, grids: _Grids, parts: _Parts, term: int, eager: Array, graph_kernel_s: float | None,
    central: IterationSurface | None,
) -> Array:  # fmt: skip
    """A pure-decode pass's body, LM head and sends (`eager`, per token count) as the engine runs it: at a band's
    edge, the `central` surface's scaled by the edge's eager time over the central's; replayed as a CUDA graph, with
    each kernel's fixed cost the graph's; eager otherwise."""
    launch = run.system.hardware.launch_s
    if central is not None and central.decode_body is not None:
        central_eager = np.asarray(central.body.y) + np.asarray(central.head.y) + np.asarray(central.send_s.y)
        ratio = np.divide(eager, central_eager, out=np.ones_like(central_eager), where=central_eager > 0)
        out: Array = np.asarray(central.decode_body.y) * ratio
        return out
    if graph_kernel_s is not None and graph_kernel_s < launch:
        # Each kernel's fixed cost (the `overhead_s` term: launches × the profile's launch cost) becomes the graph's.
        seqs, tokens = grids.seqs, grids.tokens
        attention_fixed = _attention(parts.decode_attention, term)[1].reshape(seqs.size, grids.ctx.size).mean(axis=1)
        over = _overheads(parts.body) + attention_fixed[np.clip(np.searchsorted(seqs, tokens), 0, seqs.size - 1)]
        graph: Array = eager - over * (1.0 - graph_kernel_s / launch)
        return graph
    return eager


def _interpolation_error(surface: IterationSurface, checks: _Checks) -> float:
    """The largest relative difference between the interpolant and the core at the off-grid check points, all at
    once: a pure decode pass without a graph body (`decode_time` less the sends) and one prefill chunk alone (`time`
    less the sends)."""
    core_dec = pass_time(checks.decode.totals())
    d_at, c_at = (np.asarray(x, dtype=np.float64) for x in checks.decode_at)
    mine_dec = surface.body.at(d_at) + surface.head.at(d_at) + surface.decode_attention.at(d_at, c_at)
    err_dec = np.abs(mine_dec - core_dec) / core_dec
    core_pre = pass_time(checks.prefill.totals())
    q_at, qc_at = (np.asarray(x, dtype=np.float64) for x in checks.prefill_at)
    mine_pre = (surface.prefill_body.at(q_at) + surface.head(1.0) + surface.attention_fixed_s
                + surface.prefill_attention.at(q_at, qc_at))  # fmt: skip
    err_pre = np.abs(mine_pre - core_pre) / core_pre
    return float(max(err_dec.max(initial=0.0), err_pre.max(initial=0.0)))


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
