"""A plan's traffic (`schemas.plan.Traffic`) as the core's search takes it: the requests' lengths (fixed, drawn or a
stored trace's), the rate to serve, and, when the requests share prefixes or are sessions' turns, the requests with
their hash chains in the order the planner replays them (`traffic_sample`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import roofline
from adapters._errors import InvalidField
from adapters._lora import check_lora
from adapters._serving import _lengths
from adapters._sharing import shared_requests, trace_requests
from adapters._traces import Trace
from roofline.serving import Requests
from schemas.plan import PlanRequest
from schemas.serving import Lengths, Load

LENGTH_SAMPLES = 4096  # lengths drawn for a distribution; the simulations cycle through them
SESSION_WAVE = 64  # sessions whose turns a plan interleaves: a session's next turn comes ~64 requests later


def _length_array(spec: int | Lengths, rng: np.random.Generator, field: str, context: int) -> np.ndarray:
    if isinstance(spec, int):
        return np.array([spec], dtype=np.int64)
    drawn: np.ndarray = np.minimum(_lengths(rng, spec, LENGTH_SAMPLES, field), context - 1)
    return drawn


def traffic_lengths(body: PlanRequest, context: int, trace: Trace | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The requests' lengths: fixed, or drawn once (seeded); drawn lengths are cut at the model's context. A stored
    trace (`trace`, the one `traffic.trace_id` names): `LENGTH_SAMPLES` of its requests drawn with replacement
    (seeded), each keeping its own prompt and output, none cut: a request beyond the context is an error."""
    t = body.traffic
    rng = np.random.default_rng(t.seed)
    if t.trace_id is not None:
        if trace is None:
            raise ValueError("traffic.trace_id names a stored trace: pass it as `trace`")
        pick = rng.integers(0, trace.prompt_tokens.size, LENGTH_SAMPLES)
        prompt, output = trace.prompt_tokens[pick], trace.output_tokens[pick]
        longest = int((trace.prompt_tokens + trace.output_tokens).max())
        if longest > context:
            raise InvalidField(
                "body.traffic.trace_id",
                f"the trace has a request of {longest} tokens (prompt and output): the model's context is {context}",
            )
        return prompt, output
    assert t.prompt_tokens is not None and t.output_tokens is not None
    prompt = _length_array(t.prompt_tokens, rng, "body.traffic.prompt_tokens", context)
    output = _length_array(t.output_tokens, rng, "body.traffic.output_tokens", context)
    if prompt.size != output.size:
        prompt, output = np.resize(prompt, LENGTH_SAMPLES), np.resize(output, LENGTH_SAMPLES)
    output = np.minimum(output, np.maximum(context - prompt, 1))
    longest = int((prompt + output).max())
    if longest > context:
        raise InvalidField(
            "body.traffic.prompt_tokens",
            f"a request of {longest} tokens (prompt and output) exceeds the model's context of {context}",
        )
    return prompt, output


def demand_requests_per_s(body: PlanRequest, output: np.ndarray, trace: Trace | None = None) -> float:
    """Requests per second to serve: the rate given, or the output-token rate over the mean output; a trace with
    neither: its own mean arrival rate."""
    t = body.traffic
    if t.requests_per_s is not None:
        return t.requests_per_s
    if t.output_tokens_per_s is not None:
        return t.output_tokens_per_s / float(output.mean())
    assert trace is not None
    rate = trace.summary()["rate_per_s"]
    if rate is None:
        raise InvalidField(
            "body.traffic.trace_id", "the trace's requests all arrive at once: it has no rate; give requests_per_s"
        )
    return float(rate)


def traffic_sample(body: PlanRequest, context: int, trace: Trace | None = None) -> Requests | None:
    """The traffic's requests when they share prefixes or name LoRA adapters, in the order the planner replays them
    (None: neither): drawn as a serving load's (`LENGTH_SAMPLES` of them; sessions' turns interleaved `SESSION_WAVE`
    sessions at a time, so that a turn comes after the one before it has ended), or a stored trace's in order
    (at most `roofline.serving` check's most requests; its sessions' turns as recorded)."""
    sample = _shared_sample(body, context, trace)
    t = body.traffic
    if trace is not None and trace.sharing is not None and trace.sharing.adapter is not None:  # LoRA: its column
        keep = min(trace.sharing.adapter.size, 20_000)
        if sample is None:
            sample = Requests(trace.prompt_tokens[:keep], trace.output_tokens[:keep], None, 0)
        return replace(sample, adapter=trace.sharing.adapter[: sample.count], adapter_rank=body.engine.max_lora_rank)
    if t.adapters is None:
        return sample
    if sample is None:  # adapters alone: the traffic's lengths, drawn as a serving load's
        assert t.prompt_tokens is not None and t.output_tokens is not None
        lengths = [v if isinstance(v, Lengths) else Lengths(value=v) for v in (t.prompt_tokens, t.output_tokens)]
        rng = np.random.default_rng(t.seed)
        new = np.minimum(_lengths(rng, lengths[0], LENGTH_SAMPLES, "body.traffic.prompt_tokens"), context - 1)
        out = np.minimum(_lengths(rng, lengths[1], LENGTH_SAMPLES, "body.traffic.output_tokens"), context - new)
        sample = Requests(new, out, None, 0)
    a = t.adapters
    check_lora(body.engine, a.rank, "body.traffic.adapters.rank")
    rng = np.random.default_rng([t.seed, 41])  # the adapters' own stream: the lengths' draws do not change
    adapter = roofline.serving.requests.adapters(rng, sample.count, a.count, str(a.popularity), a.zipf_exponent)
    return replace(sample, adapter=adapter, adapter_rank=a.rank)


def _shared_sample(body: PlanRequest, context: int, trace: Trace | None = None) -> Requests | None:
    t = body.traffic
    block = body.engine.kv_block_tokens
    if trace is not None and trace.sharing is not None:
        shared = trace_requests(trace, block)
        if shared.hashes is None:
            return None
        keep = min(shared.count, 20_000)
        return _first(shared, keep)
    if t.prefix_tokens is None and t.sessions is None:
        return None
    assert t.prompt_tokens is not None and t.output_tokens is not None
    lengths = [v if isinstance(v, Lengths) else Lengths(value=v) for v in (t.prompt_tokens, t.output_tokens)]
    load = Load(
        rate_per_s=1.0, requests=LENGTH_SAMPLES, prompt_tokens=lengths[0], output_tokens=lengths[1],
        prefix_tokens=t.prefix_tokens, prefix_groups=t.prefix_groups, sessions=t.sessions, seed=t.seed,
    )  # fmt: skip
    rng = np.random.default_rng(t.seed)
    new = np.minimum(_lengths(rng, lengths[0], LENGTH_SAMPLES, "body.traffic.prompt_tokens"), context - 1)
    out = np.minimum(_lengths(rng, lengths[1], LENGTH_SAMPLES, "body.traffic.output_tokens"), context - 1)
    try:
        shared = shared_requests(load, rng, new, out, block, context)
    except InvalidField as err:
        raise InvalidField(err.field.replace("body.load", "body.traffic"), err.message) from None
    if shared.after is None:
        return replace_order(shared, np.arange(shared.count))
    # turn k of each session in a wave of SESSION_WAVE sessions, then turn k + 1 of each, …
    first = shared.after < 0
    session = np.cumsum(first) - 1
    turn = np.arange(shared.count) - np.flatnonzero(first)[session]
    order = np.lexsort((session, turn, session // SESSION_WAVE))
    return replace_order(shared, order)


def _first(r: Requests, n: int) -> Requests:
    assert r.hashes is not None and r.hash_starts is not None
    starts = r.hash_starts[: n + 1]
    return Requests(r.prompt[:n], r.output[:n], None, 0, r.hashes[: int(starts[-1])], starts, r.hash_block)


def replace_order(r: Requests, order: np.ndarray) -> Requests:
    """The requests in `order`, their chains with them, without arrivals or sessions' timing."""
    assert r.hashes is not None and r.hash_starts is not None
    counts = np.diff(r.hash_starts)[order]
    starts = np.zeros(order.size + 1, dtype=np.int64)
    starts[1:] = np.cumsum(counts)
    pieces = [r.hashes[r.hash_starts[i] : r.hash_starts[i + 1]] for i in order.tolist()]
    hashes = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return Requests(r.prompt[order], r.output[order], None, 0, hashes, starts, r.hash_block)
