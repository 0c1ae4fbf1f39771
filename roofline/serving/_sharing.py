"""Loads that share their prompts' prefixes: a prefix common to every request or to each of several groups (with a
popularity), and multi-turn sessions whose every turn's prompt is the session's history (prompts and answers so
far) and new tokens. Each request's prompt gets its chain of block hashes (`Requests.hashes`): equal hashes at a
position are the same tokens and everything before them, as the engines' block hashes are (vLLM
vllm/v1/core/kv_cache_utils.py `hash_block_tokens`)."""

from __future__ import annotations

import numpy as np

from roofline.serving._config import FloatArray, IntArray, Requests, ServingConfigError

POPULARITIES = ("uniform", "zipf")


def group_of(rng: np.random.Generator, count: int, groups: int, popularity: str = "uniform",
             exponent: float = 1.0) -> IntArray:  # fmt: skip
    """Each request's group, 0 … groups − 1: uniform, or Zipf (group k, 1-based, chosen with probability ∝ k^−s,
    s = `exponent`: the rank-frequency law of Zipf 1949, as prompt and document popularity is usually modelled)."""
    if groups == 1:
        return np.zeros(count, dtype=np.int64)
    if popularity == "uniform":
        out: IntArray = rng.integers(0, groups, size=count).astype(np.int64)
        return out
    if popularity != "zipf":
        raise ServingConfigError("load.prefix_groups.popularity", f"one of {', '.join(POPULARITIES)}")
    weights = np.arange(1, groups + 1, dtype=np.float64) ** -exponent
    picked: IntArray = rng.choice(groups, size=count, p=weights / weights.sum()).astype(np.int64)
    return picked


def sharing(new: IntArray, output: IntArray, block: int, prefix_tokens: int = 0, group: IntArray | None = None,
            previous: IntArray | None = None, max_blocks: int = 0) -> tuple[IntArray, IntArray, IntArray]:  # fmt: skip
    """Prompts and hash chains of requests that share: request i's prompt is its group's prefix of `prefix_tokens`
    (group 0 when `group` is None) and `new[i]` tokens, or, when `previous[i]` ≥ 0 (an earlier request: the turn
    before it in its session), the whole sequence of that request (its prompt and answer) and `new[i]` tokens.
    Returns (prompt, hashes, starts) as `Requests` holds them, in blocks of `block` tokens; a request that another
    follows carries its answer's full blocks too, so that the next turn reuses them. `max_blocks` (> 0): refuse
    (`ServingConfigError` naming `load`) a load whose chains would hold more hashes in all."""
    n = new.size
    groups = int(group.max()) + 1 if group is not None and n else 1
    head = prefix_tokens // block  # full blocks of a group's prefix
    followed = np.zeros(n, dtype=bool)
    if previous is not None:
        followed[previous[previous >= 0]] = True
    new_l, out_l = new.tolist(), output.tolist()
    prev_l = previous.tolist() if previous is not None else [-1] * n
    group_l = group.tolist() if group is not None else [0] * n
    prompt_l = [0] * n
    for i in range(n):
        p = prev_l[i]
        prompt_l[i] = (prompt_l[p] + out_l[p] if p >= 0 else prefix_tokens) + new_l[i]
    prompt = np.array(prompt_l, dtype=np.int64)
    counts = (prompt + np.where(followed, output, 0)) // block
    if max_blocks and int(counts.sum()) > max_blocks:
        raise ServingConfigError(
            "load", f"its prompts hold {int(counts.sum()):,} blocks of {block} tokens in all, more than the "
            f"{max_blocks:,} a shared load may: fewer requests, turns or tokens",
        )  # fmt: skip
    prefixes = np.arange(groups * head, dtype=np.int64).reshape(groups, head)
    chains: list[IntArray] = []
    fresh = groups * head  # the next hash not yet used
    for i, blocks in enumerate(counts.tolist()):
        p = prev_l[i]
        base = chains[p] if p >= 0 else prefixes[group_l[i]]
        extra = blocks - base.size
        chains.append(np.concatenate([base, np.arange(fresh, fresh + extra, dtype=np.int64)]) if extra > 0 else base)
        fresh += max(extra, 0)
    starts = np.zeros(n + 1, dtype=np.int64)
    starts[1:] = np.cumsum(counts)
    hashes = np.concatenate(chains) if chains else np.zeros(0, dtype=np.int64)
    return prompt, hashes.astype(np.int64), starts


def sessions(rng: np.random.Generator, turns: IntArray, count: int) -> tuple[IntArray, IntArray]:
    """`count` requests as turns of sessions of `turns[s]` turns each (in order, the last cut short): each
    request's session and the request before it in its session (−1 for a first turn)."""
    ends = np.cumsum(turns)
    sessions_needed = int(np.searchsorted(ends, count, side="left")) + 1
    session = np.repeat(np.arange(sessions_needed), turns[:sessions_needed])[:count].astype(np.int64)
    first = np.ones(count, dtype=bool)
    first[1:] = session[1:] != session[:-1]
    previous = np.where(first, -1, np.arange(count) - 1).astype(np.int64)
    return session, previous


def subset(requests: Requests, ids: IntArray, arrival: FloatArray | None, concurrency: int) -> Requests:
    """The requests `ids` as a run of their own, their hash chains with them."""
    adapter = requests.adapter[ids] if requests.adapter is not None else None
    if requests.hashes is None or requests.hash_starts is None:
        return Requests(requests.prompt[ids], requests.output[ids], arrival, concurrency, adapter=adapter,
                        adapter_rank=requests.adapter_rank)  # fmt: skip
    s = requests.hash_starts
    counts = (s[1:] - s[:-1])[ids]
    starts = np.zeros(ids.size + 1, dtype=np.int64)
    starts[1:] = np.cumsum(counts)
    pieces = [requests.hashes[s[i] : s[i + 1]] for i in ids.tolist()]
    hashes = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return Requests(requests.prompt[ids], requests.output[ids], arrival, concurrency, hashes, starts,
                    requests.hash_block, adapter=adapter, adapter_rank=requests.adapter_rank)  # fmt: skip
