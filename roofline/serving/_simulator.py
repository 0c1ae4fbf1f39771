"""The event loop: requests arrive (an open loop's times, or a closed loop's clients sending again when their
request ends), engines run iterations, disaggregated prefill workers hand requests to decode workers after their KV
cache crosses the fabric; every request's arrival, admission, first token and end are recorded."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from roofline.serving._config import Requests, Scheduler
from roofline.serving._engine import INF, Engine
from roofline.serving._surface import IterationSurface

ARRIVE, END, HANDOFF = 0, 1, 2
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


class Simulation:
    """One loop over `prefill` engines (all engines when aggregated) and optional decode engines."""

    def __init__(
        self,
        requests: Requests,
        pool: Pool,
        decode_pool: Pool | None,
        transfer_s: Callable[[int], float] | None,
        series: bool,
    ) -> None:
        n = requests.count
        self.requests = requests
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
        self.trace = Trace([nan] * n, [nan] * n, [nan] * n, [nan] * n, series=[] if series else None)
        self.transfer = transfer_s
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.front = [Engine(self, pool.surface, pool.scheduler, "both" if decode_pool is None else "prefill",
                             pool.launch_s) for _ in range(pool.engines)]  # fmt: skip
        self.back = (
            [
                Engine(self, decode_pool.surface, decode_pool.scheduler, "decode", decode_pool.launch_s)
                for _ in range(decode_pool.engines)
            ]
            if decode_pool is not None
            else []
        )
        self.engines = self.front + self.back
        self.index = {id(e): i for i, e in enumerate(self.engines)}
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

    def handoff(self, rid: int, now: float) -> None:
        assert self.transfer is not None
        self.push(now + self.transfer(self.original[rid]), HANDOFF, rid)

    def record(self, now: float, seconds: float, k: int, decoding: int, tokens: int, prefilling: int, kv: float,
               prefill_share: float, context: float, width: int = 1) -> None:  # fmt: skip
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

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> Trace:
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
            times = [arrival[i] for i in ids]
        events, trace, engines = self.events, self.trace, self.engines
        count, at = len(ids), 0
        idle: list[Engine] = []  # engines given work at `now`, started once every event at `now` is in
        while at < count or events:
            if at < count and (not events or times[at] <= events[0][0]):
                now, kind, a = times[at], ARRIVE, ids[at]
                at += 1
            else:
                now, _, kind, a = heapq.heappop(events)
            if kind == END:
                engine = engines[a]
                engine.finish(now)
                idle.append(engine)
            else:
                if kind == ARRIVE:
                    trace.arrival[a] = now
                target = self._route(self.front if kind == ARRIVE else self.back)
                target.waiting.append(a)
                if not target.busy:
                    idle.append(target)
            if idle:
                arriving = times[at] if at < count else INF
                if arriving > now and (not events or events[0][0] > now):
                    for engine in idle:  # each sees the ends of those started before it as its horizon too
                        if not engine.busy:
                            horizon = events[0][0] if events and events[0][0] < arriving else arriving
                            self._start(engine, now, horizon)
                    idle.clear()
        self.trace.preemptions = self.preemptions
        return self.trace

    def _start(self, engine: Engine, now: float, horizon: float) -> None:
        end = engine.start(now, horizon)
        if end is not None:
            self.push(end, END, self.index[id(engine)])

    def _route(self, engines: list[Engine]) -> Engine:
        """The least loaded engine (fewest requests held; the first of equals)."""
        if len(engines) == 1:
            return engines[0]
        return min(engines, key=lambda e: len(e.waiting) + len(e.prefilling) + e.decoding)


def simulate(
    requests: Requests,
    pool: Pool,
    decode_pool: Pool | None = None,
    transfer_s: Callable[[int], float] | None = None,
    series: bool = False,
) -> Trace:
    """Run the requests through the engines. Aggregated engines share nothing, so each runs its own loop on its
    share of the requests (a closed loop's clients, or every R-th arrival): the loops' horizons then see only their
    own arrivals, which lets pure-decode stretches run long."""
    if decode_pool is not None or pool.engines == 1:
        return Simulation(requests, pool, decode_pool, transfer_s, series).run()
    n, r = requests.count, pool.engines
    single = Pool(pool.surface, pool.scheduler, 1, pool.launch_s)
    merged = Trace([math.nan] * n, [math.nan] * n, [math.nan] * n, [math.nan] * n, series=[] if series else None)
    active = min(r, requests.concurrency) if requests.concurrency else r
    for e in range(active):
        ids = np.arange(e, n, active)
        if ids.size == 0:
            continue
        conc = 0
        if requests.concurrency:
            conc = requests.concurrency // active + (1 if e < requests.concurrency % active else 0)
        arr = None if requests.arrival_s is None else requests.arrival_s[ids]
        part = Requests(requests.prompt[ids], requests.output[ids], arr, conc)
        tr = Simulation(part, single, None, None, series).run()
        for j, rid in enumerate(ids.tolist()):
            merged.arrival[rid], merged.admit[rid] = tr.arrival[j], tr.admit[j]
            merged.first[rid], merged.end[rid] = tr.first[j], tr.end[j]
        for name in SUMS:
            setattr(merged, name, getattr(merged, name) + getattr(tr, name))
        merged.iterations += tr.iterations
        merged.preemptions += tr.preemptions
        merged.max_batched_tokens = max(merged.max_batched_tokens, tr.max_batched_tokens)
        if merged.series is not None and tr.series is not None and e == 0:
            merged.series.extend(tr.series)
    return merged
