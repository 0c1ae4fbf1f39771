"""The event loop: requests arrive (an open loop's times, or a closed loop's clients sending again when their
request ends), engines run iterations, disaggregated prefill workers hand requests to decode workers after their KV
cache crosses the fabric; every request's arrival, admission, first token and end are recorded."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from roofline._stop import CHECK_EVERY, StopCheck, Stopped, never
from roofline.serving._config import IntArray, Requests, Scheduler
from roofline.serving._engine import INF, Engine
from roofline.serving._lora import LoraStats
from roofline.serving._prefix import CacheStats, cache_stats
from roofline.serving._sharing import subset
from roofline.serving._surface import IterationSurface

ARRIVE, END, HANDOFF = 0, 1, 2
CACHE_THRESHOLD = 0.5  # SGLang router's default cache_threshold (sgl-router, cache-aware policy)
# The time-weighted sums of a `Trace` (loops that run apart add theirs).
SUMS = (
    "busy_s", "batch_s", "kv_s", "prefill_s", "mixed_s", "mixed_tokens_s", "mixed_decoding_s", "mixed_context_s",
    "decode_s", "decode_decoding_s", "decode_context_s",
)  # fmt: skip


@dataclass(frozen=True)
class Pool:
    """`engines` identical engines (replicas, or a pipeline's virtual engines) of one surface and scheduler;
    `launch_s` the device's kernel launch cost (for runs without CUDA graphs)."""

    surface: IterationSurface
    scheduler: Scheduler
    engines: int = 1
    launch_s: float = 5e-6


@dataclass
class Trace:
    """What the loop recorded: per request (arrival, admission, first token, end) and per iteration."""

    arrival: list[float]
    admit: list[float]
    first: list[float]
    end: list[float]
    busy_s: float = 0.0
    batch_s: float = 0.0  # Σ duration × sequences in the iteration
    kv_s: float = 0.0  # Σ duration × KV pool fraction in use
    prefill_s: float = 0.0  # Σ duration × the prefill tokens' share of the iteration's tokens
    iterations: int = 0
    preemptions: int = 0
    series: list[tuple[float, float, int, int, float]] | None = None  # (start, seconds, decoding, prefill tokens, kv)
    max_batched_tokens: int = 0
    # Iterations with prefill chunks (`mixed_*`) and pure-decode ones (`decode_*`): their seconds and the seconds-
    # weighted sums of their prefill tokens, decoding sequences and those sequences' keys (the mean mix of each).
    mixed_s: float = 0.0
    mixed_tokens_s: float = 0.0
    mixed_decoding_s: float = 0.0
    mixed_context_s: float = 0.0
    decode_s: float = 0.0
    decode_decoding_s: float = 0.0
    decode_context_s: float = 0.0
    caches: list[CacheStats] | None = None  # prefix caching: per engine of the front pool
    lora: list[LoraStats] | None = None  # LoRA adapters: per engine (front pool, then back)
    adapters: list[int] | None = None  # with `series`: distinct adapters in each recorded iteration


class Simulation:
    """One loop over `prefill` engines (all engines when aggregated) and optional decode engines."""

    def __init__(
        self,
        requests: Requests,
        pool: Pool,
        decode_pool: Pool | None,
        transfer_s: Callable[[int], float] | None,
        series: bool,
        router: str | None = None,
    ) -> None:
        n = requests.count
        self.requests = requests
        # sharing: the requests' block-hash chains (made on first use), the turn that follows each request
        self.hash_block = requests.hash_block if requests.hashes is not None else 0
        self.chains: list[list[int]] = []
        if requests.hashes is not None and requests.hash_starts is not None:
            flat, starts = requests.hashes.tolist(), requests.hash_starts.tolist()
            self.chains = [flat[a:b] for a, b in itertools.pairwise(starts)]
        self.next_turn: dict[int, int] = {}
        if requests.after is not None:
            follows = np.flatnonzero(requests.after >= 0)
            self.next_turn = dict(zip(requests.after[follows].tolist(), follows.tolist(), strict=True))
        self.router, self.turn = router, 0  # None: the least loaded engine
        # Aggregated engines in one loop (`shared`) touch each other only through arrivals: an engine's end can send
        # no request sooner than `spawn_gap` after it (a session's next turn, after its think time), so an engine's
        # stretch of decode iterations runs on past other engines' ends (`_horizon`). None: every event is a horizon
        # (a closed loop's next request, a disaggregated handoff, may follow an end at once).
        self.spawn_gap: float | None = None
        if decode_pool is None and not requests.concurrency and min(pool.engines, n) > 1:
            self.spawn_gap = INF
            if requests.after is not None and self.next_turn:
                think = requests.think_s
                self.spawn_gap = 0.0 if think is None else float(think[list(self.next_turn.values())].min())
        self.adapter: list[int] | None = requests.adapter.tolist() if requests.adapter is not None else None
        self.adapter_rank = requests.adapter_rank
        self.prompt: list[int] = requests.prompt.tolist()
        self.original = list(self.prompt)
        self.output: list[int] = requests.output.tolist()
        self.left = list(self.output)
        self.reserve = [p + o for p, o in zip(self.prompt, self.output, strict=True)]
        self.done = [0] * n
        self.base: list[float] = [0.0] * n
        self.join_it = [-1] * n
        self.version = [0] * n
        self.preemptions = 0
        nan = math.nan
        self.trace = Trace([nan] * n, [nan] * n, [nan] * n, [nan] * n, series=[] if series else None,
                           adapters=[] if series else None)  # fmt: skip
        self.transfer = transfer_s
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        # Requests go to the least loaded engine, the first of equals: with n requests, one of the first n engines is
        # always empty when a request is routed (the other n − 1 hold the rest at most), so engines past the n-th never
        # get one and are not made.
        self.front = [Engine(self, pool.surface, pool.scheduler, "both" if decode_pool is None else "prefill",
                             pool.launch_s) for _ in range(min(pool.engines, n))]  # fmt: skip
        self.back = (
            [
                Engine(self, decode_pool.surface, decode_pool.scheduler, "decode", decode_pool.launch_s)
                for _ in range(min(decode_pool.engines, n))
            ]
            if decode_pool is not None
            else []
        )
        self.engines = self.front + self.back
        self.index = {id(e): i for i, e in enumerate(self.engines)}
        # Each pool's engines by (load, position), lazily: an engine's entry is pushed again whenever its load may
        # have changed (a request routed to it, its iteration started or ended) and stale entries are dropped when
        # they come to the top, so the top valid entry is the least loaded engine, the first of equals.
        self.loads = [[(0, i) for i in range(len(self.front))], [(0, i) for i in range(len(self.back))]]
        self.pending: deque[int] = deque()

    # -- callbacks from engines ----------------------------------------------------------------------------------

    def push(self, t: float, kind: int, a: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, a))

    def admitted(self, rid: int, now: float) -> None:
        if math.isnan(self.trace.admit[rid]):
            self.trace.admit[rid] = now

    def first_token(self, rid: int, now: float) -> None:
        if math.isnan(self.trace.first[rid]):
            self.trace.first[rid] = now

    def finished(self, rid: int, now: float, engine: Engine) -> None:
        self.trace.end[rid] = now
        if self.requests.concurrency and self.pending:
            self.push(now, ARRIVE, self.pending.popleft())
        nxt = self.next_turn.get(rid, -1)
        if nxt >= 0:  # the session's next turn: its think time after this one ends, never before its own arrival
            req = self.requests
            think = 0.0 if req.think_s is None else float(req.think_s[nxt])
            floor = 0.0 if req.arrival_s is None else float(req.arrival_s[nxt])
            self.push(max(now + think, floor), ARRIVE, nxt)

    def chain(self, rid: int) -> list[int]:
        return self.chains[rid]

    def handoff(self, rid: int, now: float) -> None:
        assert self.transfer is not None
        self.push(now + self.transfer(self.original[rid]), HANDOFF, rid)

    def record(self, now: float, seconds: float, k: int, decoding: int, tokens: int, prefilling: int, kv: float,
               prefill_share: float, context: float, width: int = 1, adapters: int = 0) -> None:  # fmt: skip
        tr = self.trace
        tr.busy_s += seconds
        tr.batch_s += seconds * (decoding + prefilling)
        tr.kv_s += seconds * kv
        tr.prefill_s += seconds * prefill_share
        if tokens:
            tr.mixed_s += seconds
            tr.mixed_tokens_s += seconds * tokens
            tr.mixed_decoding_s += seconds * decoding
            tr.mixed_context_s += seconds * context
        else:
            tr.decode_s += seconds
            tr.decode_decoding_s += seconds * decoding
            tr.decode_context_s += seconds * context
        tr.iterations += max(k, 1)
        if tokens + decoding * width > tr.max_batched_tokens:
            tr.max_batched_tokens = tokens + decoding * width
        if tr.series is not None:
            tr.series.append((now, seconds, decoding, tokens, kv))
        if tr.adapters is not None:
            tr.adapters.append(adapters)

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self, should_stop: StopCheck = never) -> Trace:
        """The loop, to its end; `Stopped` if `should_stop` answers true (asked every `CHECK_EVERY` events)."""
        req = self.requests
        # The run's own arrivals (a closed loop's first clients, every arrival of an open one) are read in order from
        # a list rather than kept in the heap, which then holds only the engines' ends, handoffs and a closed loop's
        # next requests: the heap stays as small as the engines. An arrival comes before a heap event of the same
        # time, as it did when every arrival entered the heap first.
        if req.concurrency:
            order = list(range(req.count))
            first, rest = order[: req.concurrency], order[req.concurrency :]
            self.pending.extend(rest)
            times, ids = [0.0] * len(first), first
        else:
            assert req.arrival_s is not None
            arrival = req.arrival_s.tolist()
            ids = sorted(range(len(arrival)), key=arrival.__getitem__)  # stable: equal times keep their order
            if req.after is not None:  # a session's later turns arrive when the turn before ends
                after = req.after.tolist()
                ids = [i for i in ids if after[i] < 0]
            times = [arrival[i] for i in ids]
        events, trace, engines = self.events, self.trace, self.engines
        count, at, step = len(ids), 0, 0
        idle: list[Engine] = []  # engines given work at `now`, started once every event at `now` is in
        while at < count or events:
            step += 1
            if step % CHECK_EVERY == 0 and should_stop():
                raise Stopped(f"stopped after {step} events")
            if at < count and (not events or times[at] <= events[0][0]):
                now, kind, a = times[at], ARRIVE, ids[at]
                at += 1
            else:
                now, _, kind, a = heapq.heappop(events)
            if kind == END:
                engine = engines[a]
                engine.finish(now)
                self._moved(engine)
                idle.append(engine)
            else:
                if kind == ARRIVE:
                    trace.arrival[a] = now
                target = self._route(1 if kind == HANDOFF else 0, a)
                target.waiting.append(a)
                self._moved(target)
                if not target.busy:
                    idle.append(target)
            if idle:
                arriving = times[at] if at < count else INF
                if arriving > now and (not events or events[0][0] > now):
                    for engine in idle:  # each sees the ends of those started before it as its horizon too
                        if not engine.busy:
                            horizon = events[0][0] if events and events[0][0] < arriving else arriving
                            if self.spawn_gap is not None and events:
                                horizon = self._horizon(arriving)
                            self._start(engine, now, horizon)
                    idle.clear()
        self.trace.preemptions = self.preemptions
        if any(e.cache is not None for e in self.front):
            self.trace.caches = [cache_stats(e.cache) for e in self.front]
        if any(e.adapters is not None for e in self.engines):
            self.trace.lora = [e.adapters.stats if e.adapters is not None else LoraStats() for e in self.engines]
        return self.trace

    def _horizon(self, arriving: float) -> float:
        """The next time an engine may be given a request: the next arrival or handoff, or an engine's end plus
        `spawn_gap` (the heap holds at most one end per engine and the requests sent at a later time)."""
        assert self.spawn_gap is not None
        gap, horizon = self.spawn_gap, arriving
        for t, _, kind, _ in self.events:
            t = t + gap if kind == END else t
            if t < horizon:
                horizon = t
        return horizon

    def _start(self, engine: Engine, now: float, horizon: float) -> None:
        end = engine.start(now, horizon)
        self._moved(engine)
        if end is not None:
            self.push(end, END, self.index[id(engine)])

    @staticmethod
    def _load(engine: Engine) -> int:
        held = len(engine.adapters.skipped) if engine.adapters is not None else 0
        return len(engine.waiting) + held + len(engine.prefilling) + engine.decoding

    def _moved(self, engine: Engine) -> None:
        """Record `engine`'s load in its pool's heap (after anything that may change it)."""
        if len(self.engines) == 1:
            return
        i = self.index[id(engine)]
        pool, at = (0, i) if i < len(self.front) else (1, i - len(self.front))
        if len((self.front, self.back)[pool]) > 1:
            heapq.heappush(self.loads[pool], (self._load(engine), at))

    def _route(self, pool: int, rid: int) -> Engine:
        """The least loaded engine of the front (0) or back (1) pool: fewest requests held, the first of equals;
        the front pool's `router` may say otherwise (round robin, prefix aware)."""
        engines, heap = (self.front, self.back)[pool], self.loads[pool]
        if len(engines) == 1:
            return engines[0]
        if pool == 0 and self.router == "round_robin":
            self.turn += 1
            return engines[(self.turn - 1) % len(engines)]
        if pool == 0 and self.router == "prefix_aware" and self.hash_block:
            best = self._prefix_route(rid)
            if best is not None:
                return best
        while self._load(engines[heap[0][1]]) != heap[0][0]:
            heapq.heappop(heap)
        return engines[heap[0][1]]

    def _prefix_route(self, rid: int) -> Engine | None:
        """The engine whose cache holds the longest prefix of the request's chain, unless its load exceeds the
        least loaded engine's by more than the scheduler's `router_threshold` (SGLang router's cache-aware policy,
        sgl-router/src/policies/cache_aware.rs, `balance_abs_threshold` 32; llm-d's prefix-cache scorer weighs the
        same match against load). None: no engine holds more than `CACHE_THRESHOLD` of its prompt (SGLang's
        `cache_threshold`), or the loads are out of balance."""
        chain, prompt = self.chain(rid), self.prompt[rid]
        best, best_k, best_load, low = None, 0, 0, None
        for e in self.front:
            load = self._load(e)
            low = load if low is None or load < low else low
            k = e.cache.device_prefix(chain, prompt) if e.cache is not None else 0
            if k > best_k or (k == best_k and best is not None and load < best_load):
                best, best_k, best_load = e, k, load
        if best is None or best_k * self.hash_block <= CACHE_THRESHOLD * prompt or low is None:
            return None
        if best_load - low > best.sched.router_threshold:
            return None
        return best


@dataclass(frozen=True)
class _Shares:
    """The requests each aggregated engine gets, `ids[e, :length[e]]` (a closed loop's clients dealt round-robin
    to every engine that has one, or every R-th arrival of an open loop; engines left without a request are left
    out), and which shares are alike: `group[e]` numbers them in order of first appearance, `first[g]` is where
    group g first appears."""

    ids: IntArray
    length: IntArray
    concurrency: IntArray
    group: IntArray
    first: IntArray


def _shares(requests: Requests, engines: int) -> _Shares:
    n, conc = requests.count, requests.concurrency
    active = min(engines, conc) if conc else min(engines, n)
    rows = -(-n // active)
    ids = np.arange(rows * active).reshape(rows, active).T  # engine e: e, e + active, e + 2·active, …
    held = ids < n
    ids = np.where(held, ids, 0)
    clients = np.zeros(active, dtype=np.int64)
    if conc:
        clients += conc // active + (np.arange(active) < conc % active)
    # Alike: the same lengths in the same order, the same clients, arrivals the same apart (padding: −1).
    columns = [np.where(held, requests.prompt[ids], -1), np.where(held, requests.output[ids], -1)]
    if requests.arrival_s is not None:
        arrival = requests.arrival_s[ids]
        columns.append(np.where(held, arrival - arrival[:, :1], -1.0))
    # + 0.0 turns a −0.0 into 0.0, so that rows equal as numbers are equal as bytes.
    features = np.hstack([*(c.astype(np.float64) for c in columns), clients[:, None].astype(np.float64)]) + 0.0
    # Rows compared by their bytes, numbered in order of first appearance. (np.unique(axis=0) views each row as one
    # structured value with a field per column and sorts those: ~1 s for two rows of 100 001 columns.)
    seen: dict[bytes, int] = {}
    group = np.fromiter((seen.setdefault(row.tobytes(), len(seen)) for row in features), np.intp, len(features))
    first = np.zeros(len(seen), dtype=np.intp)
    first[group[::-1]] = np.arange(len(group) - 1, -1, -1)  # the last write of each group is its first row
    return _Shares(ids, held.sum(axis=1), clients, group, first)


def shared(requests: Requests, pool: Pool) -> bool:
    """Whether aggregated engines run in one loop: when a router other than round robin spreads the requests, when
    requests share cached prefixes, or when sessions' turns follow each other."""
    sched = pool.scheduler
    return pool.engines > 1 and (sched.router != "round_robin" or requests.after is not None)


def _caching(requests: Requests, pool: Pool) -> bool:
    """Whether each engine keeps state of its own share (a prefix cache, adapters): every share its own loop."""
    lora = pool.scheduler.lora is not None and requests.adapter is not None
    return lora or (pool.scheduler.prefix_caching and requests.hashes is not None)


def loops(requests: Requests, pool: Pool, decode_pool: Pool | None = None) -> int:
    """Event loops `simulate` runs: one when disaggregated (or on one engine), else one per distinct share of the
    requests among the aggregated engines (`simulate`): never more than the requests, whatever the engines."""
    if decode_pool is not None or pool.engines == 1 or shared(requests, pool):
        return 1
    shares = _shares(requests, pool.engines)
    return int(shares.ids.shape[0] if _caching(requests, pool) else shares.first.size)


def simulate(
    requests: Requests,
    pool: Pool,
    decode_pool: Pool | None = None,
    transfer_s: Callable[[int], float] | None = None,
    series: bool = False,
    should_stop: StopCheck = never,
) -> Trace:
    """Run the requests through the engines. Aggregated engines share nothing, so each runs its own loop on its
    share of the requests (a closed loop's clients, or every R-th arrival): the loops' horizons then see only their
    own arrivals, which lets pure-decode stretches run long. Engines whose shares are alike (the same lengths in the
    same order, the same clients, arrivals the same apart) run the same loop, so it runs once for them all, its
    times moved by each engine's first arrival (closed loops all start at 0 and take its times as they are; an open
    loop's to rounding); engines without a request run nothing (`loops`). `should_stop` is asked every
    `CHECK_EVERY` events of each loop (`Stopped` when it answers true)."""
    if decode_pool is not None or pool.engines == 1:
        router = pool.scheduler.router if pool.scheduler.router != "round_robin" else None
        return Simulation(requests, pool, decode_pool, transfer_s, series, router).run(should_stop)
    if shared(requests, pool):  # the engines' caches and the sessions' turns tie their loops together
        return Simulation(requests, pool, None, None, series, pool.scheduler.router).run(should_stop)
    single = Pool(pool.surface, pool.scheduler, 1, pool.launch_s)
    shares = _shares(requests, pool.engines)
    if _caching(requests, pool):  # each engine's cache or adapters see only its own share: every share its own loop
        own = np.arange(shares.ids.shape[0])
        shares = _Shares(shares.ids, shares.length, shares.concurrency, own, own)
    times = np.full((4, requests.count), math.nan)  # arrival, admit, first token, end
    start = np.zeros(shares.ids.shape[0]) if requests.arrival_s is None else requests.arrival_s[shares.ids[:, 0]]
    members = np.argsort(shares.group, kind="stable")
    bounds = np.searchsorted(shares.group[members], np.arange(shares.first.size + 1))
    traces = []
    for g, e in enumerate(shares.first.tolist()):
        if g and should_stop():  # loops too short to ask on their own
            raise Stopped(f"stopped after {g} of {shares.first.size} loops")
        size = int(shares.length[e])
        ids = shares.ids[e, :size]
        arr = None if requests.arrival_s is None else requests.arrival_s[ids]
        part = subset(requests, ids, arr, int(shares.concurrency[e]))
        tr = Simulation(part, single, None, None, series and e == 0).run(should_stop)
        traces.append(tr)
        own = np.array([tr.arrival, tr.admit, tr.first, tr.end])
        if bounds[g + 1] - bounds[g] > 1:
            alike = members[bounds[g] : bounds[g + 1]]
            shift = start[alike] - start[e]
            times[:, shares.ids[alike, :size]] = own[:, None, :] + shift[None, :, None]
        times[:, ids] = own  # the loop's own engine: its times as they are
    arrival, admit, first, end = (t.tolist() for t in times)
    merged = Trace(arrival, admit, first, end, series=traces[0].series, adapters=traces[0].adapters)
    # Each engine's sums added in engine order, as one loop per engine would add them (cumsum adds in order).
    sums = np.array([[getattr(tr, name) for name in SUMS] for tr in traces])[shares.group]
    for name, total in zip(SUMS, np.cumsum(sums, axis=0)[-1].tolist(), strict=True):
        setattr(merged, name, total)
    counts = np.bincount(shares.group, minlength=len(traces))
    merged.iterations = int(sum(c * tr.iterations for c, tr in zip(counts.tolist(), traces, strict=True)))
    merged.preemptions = int(sum(c * tr.preemptions for c, tr in zip(counts.tolist(), traces, strict=True)))
    merged.max_batched_tokens = max(tr.max_batched_tokens for tr in traces)
    if any(tr.caches for tr in traces):
        merged.caches = [c for tr in traces for c in tr.caches or []]
    if any(tr.lora for tr in traces):
        merged.lora = [c for tr in traces for c in tr.lora or []]
    return merged
