"""Loads that share prefixes (`schemas.serving.Load`'s `prefix_tokens`, `prefix_groups`, `sessions`) as the core's
requests with their block-hash chains and sessions' order (`roofline.serving.requests`), and what prefix caching did
as `PrefixCacheRead`'s fields."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters._errors import InvalidField
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
