"""Loads that share prefixes (`schemas.serving.Load`'s `prefix_tokens`, `prefix_groups`, `sessions`) as the core's
requests with their block-hash chains and sessions' order (`roofline.serving.requests`), and what prefix caching did
as `PrefixCacheRead`'s fields."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters._errors import InvalidField
from adapters._traces import Trace
from roofline.serving import CacheStats, Requests, ServingConfigError
from roofline.serving import requests as draw
from schemas import limits
from schemas.serving import Lengths, Load
from schemas.sharing import ThinkKind, ThinkTime


def _think(rng: np.random.Generator, spec: ThinkTime, count: int) -> np.ndarray:
    if spec.kind is ThinkKind.fixed:
        return np.full(count, float(spec.value or 0.0))
    if spec.kind is ThinkKind.exponential:
        return rng.exponential(float(spec.mean or 0.0), size=count)
    return rng.uniform(float(spec.low or 0.0), float(spec.high or 0.0), size=count)


def _turns(rng: np.random.Generator, spec: Lengths, count: int) -> np.ndarray:
    turns = draw.lengths(
        rng, count, str(spec.kind), "load.sessions.turns", value=float(spec.value or 0), low=float(spec.low or 0),
        high=float(spec.high or 0), mean=float(spec.mean or 0), std=float(spec.std or 0), values=spec.values,
    )  # fmt: skip
    return np.minimum(turns, limits.MAX_SESSION_TURNS)


def shared_requests(load: Load, rng: np.random.Generator, new: np.ndarray, output: np.ndarray, block: int,
                    context_limit: int) -> Requests:  # fmt: skip
    """The requests of a load that shares: `new` and `output` drawn as for any load (each request's own prompt
    tokens and answer), a prefix before them, sessions' history before a later turn's. A turn whose history would
    take it past the model's context starts its session afresh (its history dropped, as a client starts a new
    conversation), still sent when the turn before it ends. Drawn after the lengths, so that a load without sharing
    draws what it drew before."""
    n = new.size
    prefix = load.prefix_tokens or 0
    if prefix and prefix + 1 >= context_limit:
        raise InvalidField("body.load.prefix_tokens", f"{prefix} tokens leave no room in the model's context "
                           f"of {context_limit}")  # fmt: skip
    new = np.minimum(new, context_limit - 1 - prefix)
    output = np.minimum(output, context_limit - prefix - new)
    group = None
    if load.prefix_groups is not None:
        g = load.prefix_groups
        group = draw.group_of(rng, n, g.count, str(g.popularity), g.zipf_exponent)
    after = think = previous = None
    arrival = None
    if load.sessions is not None:
        _session, after = draw.sessions(rng, _turns(rng, load.sessions.turns, n), n)
        think = _think(rng, load.sessions.think_s, n)
        heads = np.flatnonzero(after < 0)
        arrival = np.zeros(n)
        if load.concurrency is not None:  # users, each starting a session when its last one ends
            users = load.concurrency
            later = heads[users:]
            after = after.copy()
            ends = np.append(heads[1:], n) - 1  # each session's last turn
            after[later] = ends[: later.size]
            think[later] = 0.0
        else:
            assert load.rate_per_s is not None
            arrival[heads] = draw.arrivals(rng, heads.size, load.rate_per_s, str(load.arrival), load.arrival_cv)
        previous = _histories(after, heads, new, output, prefix, context_limit)
    try:
        prompt, hashes, starts = draw.sharing(new, output, block, prefix, group, previous, limits.MAX_SHARED_BLOCKS)
    except ServingConfigError as err:
        raise InvalidField(f"body.{err.field}", err.message) from None
    if load.sessions is None:
        arrival = None if load.concurrency is not None else _open_arrivals(load, rng, n)
    closed = load.concurrency if load.concurrency is not None and load.sessions is None else 0
    return Requests(prompt, output, arrival, closed, hashes, starts, block, after, think)


def _open_arrivals(load: Load, rng: np.random.Generator, n: int) -> np.ndarray:
    assert load.rate_per_s is not None
    return draw.arrivals(rng, n, load.rate_per_s, str(load.arrival), load.arrival_cv)


def _histories(after: np.ndarray, heads: np.ndarray, new: np.ndarray, output: np.ndarray, prefix: int,
               limit: int) -> np.ndarray:  # fmt: skip
    """The turn whose history each request carries (−1: none): the turn before it in its session, unless the
    history would not fit the model's context (the session starts afresh there)."""
    previous = after.copy()
    previous[heads] = -1
    new_l, out_l, prev_l = new.tolist(), output.tolist(), previous.tolist()
    prompt = [0] * len(new_l)
    for i, p in enumerate(prev_l):
        if p >= 0 and prompt[p] + out_l[p] + new_l[i] + out_l[i] > limit:
            prev_l[i] = p = -1
        prompt[i] = (prompt[p] + out_l[p] if p >= 0 else prefix) + new_l[i]
    return np.array(prev_l, dtype=np.int64)


def cache_counts(stats: list[CacheStats]) -> dict[str, Any]:
    """`CacheCounts`' fields of one engine's cache, or of several added together."""
    prompt = sum(s.prompt_tokens for s in stats)
    hit = sum(s.hit_tokens for s in stats)
    lookups = sum(s.lookup_blocks for s in stats)
    hits = sum(s.hit_blocks for s in stats)
    return {
        "prompt_tokens": prompt,
        "prefilled_tokens": prompt - hit,
        "hit_rate_tokens": hit / prompt if prompt else 0.0,
        "lookup_blocks": lookups,
        "hit_blocks": hits,
        "hit_rate_blocks": hits / lookups if lookups else 0.0,
        "host_hit_blocks": sum(s.host_hit_blocks for s in stats),
        "evictions": sum(s.evictions for s in stats),
        "host_transfer_s": sum(s.host_s for s in stats),
    }


def prefix_cache_read(stats: list[CacheStats] | None, block: int) -> dict[str, Any] | None:
    """`PrefixCacheRead`'s fields (None without a cache): in all, and per engine that got requests."""
    if not stats:
        return None
    used = [s for s in stats if s.prompt_tokens]
    return {"total": cache_counts(stats), "engines": [cache_counts([s]) for s in used], "block_tokens": block}


def trace_requests(trace: Trace, block: int) -> Requests:
    """A trace's requests with what they share: its prefix hashes chained (each block named with every block before
    it: a trace's hash names its block's tokens, Mooncake's already its prefix, and chaining an already chained one
    changes nothing) in the trace's blocks; without hashes but with sessions, each turn's history (the turn before
    it, prompt and answer, as far as its prompt goes) in the engine's blocks of `block` tokens. A later turn of a
    session is sent no earlier than its recorded arrival and than the turn before it ends."""
    base = Requests(trace.prompt_tokens, trace.output_tokens, trace.arrival_s, 0)
    sharing = trace.sharing
    if sharing is None:
        return base
    n = len(trace.arrival_s)
    after = _previous_turns(sharing.session, sharing.turn)
    sessions = bool((after >= 0).any())
    if sharing.hashes.size:
        hashes = _chained(sharing.hashes, sharing.starts)
        return Requests(base.prompt, base.output, base.arrival_s, 0, hashes, sharing.starts, sharing.block,
                        after if sessions else None, np.zeros(n) if sessions else None)  # fmt: skip
    if not sessions:
        return base
    prompt, output = trace.prompt_tokens.tolist(), trace.output_tokens.tolist()
    chains: list[list[int]] = []
    fresh = 0
    for i, p in enumerate(after.tolist()):
        keep = chains[p][: prompt[i] // block] if p >= 0 else []
        total = (prompt[i] + output[i]) // block
        chains.append(keep + list(range(fresh, fresh + total - len(keep))))
        fresh += max(total - len(keep), 0)
    counts = np.array([len(c) for c in chains], dtype=np.int64)
    if int(counts.sum()) > limits.MAX_SHARED_BLOCKS:
        raise InvalidField("body.load.trace_id", f"its sessions' histories hold {int(counts.sum()):,} blocks of "
                           f"{block} tokens: at most {limits.MAX_SHARED_BLOCKS:,}")  # fmt: skip
    starts = np.zeros(n + 1, dtype=np.int64)
    starts[1:] = np.cumsum(counts)
    hashes = np.array([h for c in chains for h in c], dtype=np.int64)
    return Requests(base.prompt, base.output, base.arrival_s, 0, hashes, starts, block, after, np.zeros(n))


def _previous_turns(session: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Each request's previous turn in its session (−1: none), the trace's order being the turns' order."""
    last: dict[int, int] = {}
    out = np.full(session.size, -1, dtype=np.int64)
    for i, s in enumerate(session.tolist()):
        if s >= 0:
            out[i] = last.get(s, -1)
            last[s] = i
    return out


def _chained(hashes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Hashes renumbered so that each names its block and every block before it."""
    ids: dict[tuple[int, int], int] = {}
    flat = hashes.tolist()
    out = [0] * len(flat)
    for i in range(starts.size - 1):
        parent = -1
        for j in range(int(starts[i]), int(starts[i + 1])):
            key = (parent, flat[j])
            parent = ids.get(key, -2)
            if parent == -2:
                parent = ids[key] = len(ids)
            out[j] = parent
    return np.array(out, dtype=np.int64)
