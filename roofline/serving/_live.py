"""The engines' scheduler in real time: requests join as they come, not known in advance, and every token is
reported at the simulated time it is made. It drives the same `Engine` steps as the offline loop (`_simulator`):
an iteration planned with `Engine.start` and ended with `Engine.finish`, one iteration at a time (a horizon of now:
an arrival that was not known when a pure-decode stretch was planned would have cut it), so what a request sees
is what the offline simulation gives the same arrivals. `ridgeline emulate` serves it over HTTP.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from roofline.serving._config import ServingConfigError
from roofline.serving._engine import Engine
from roofline.serving._simulator import Pool


@dataclass(frozen=True)
class TokenEvent:
    """`tokens` more output tokens of request `rid` at `time_s` (the first is its first token); `done`: it ended."""

    rid: int
    time_s: float
    tokens: int
    done: bool


class LiveServing:
    """A pool's engines (aggregated) serving requests that arrive while they run; times are the caller's clock in
    seconds, never before the last time given. Requests go to the least loaded engine, the first of equals, as in
    the offline loop."""

    def __init__(self, pool: Pool, max_tokens: int) -> None:
        if pool.engines < 1:
            raise ServingConfigError("replicas", "at least one engine")
        self.max_tokens = max_tokens  # the longest request (prompt and output) the engines' surface covers
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.done: list[int] = []
        self.left: list[int] = []
        self.base: list[float] = []
        self.join_it: list[int] = []
        self.version: list[int] = []
        self.reserve: list[int] = []
        self.preemptions = 0
        self.hash_block = 0  # live requests carry no prefix hashes: the engines' prefix caches stay off
        self.adapter: list[int] | None = None  # nor LoRA adapters: every request runs on the base model
        self.adapter_rank = 0
        self.engines = [Engine(self, pool.surface, pool.scheduler, "both", pool.launch_s) for _ in range(pool.engines)]
        self.index = {id(e): i for i, e in enumerate(self.engines)}
        self.ends: list[tuple[float, int]] = []  # (end of the iteration in flight, engine)
        self.active: list[set[int]] = [set() for _ in self.engines]  # requests past their first token
        self.sent: list[int] = []  # tokens reported per request
        self.ending: list[int] = []
        self.firsts: list[int] = []
        self.pending: list[tuple[float, Engine]] = []  # engines given work, started once their time is complete
        self.events: list[TokenEvent] = []
        self.now = 0.0
        self.iterations = 0

    # -- the Loop protocol (Engine's callbacks) -------------------------------------------------------------------

    def chain(self, rid: int) -> list[int]:
        return []

    def admitted(self, rid: int, now: float) -> None:
        pass

    def first_token(self, rid: int, now: float) -> None:
        self.firsts.append(rid)

    def finished(self, rid: int, now: float, engine: Engine) -> None:
        self.ending.append(rid)

    def handoff(self, rid: int, now: float) -> None:  # pragma: no cover - aggregated engines hand nothing off
        raise ServingConfigError("mode", "the live engines are aggregated")

    def record(self, now: float, seconds: float, k: int, decoding: int, tokens: int, prefilling: int, kv: float,
               prefill_share: float, context: float, width: int = 1, adapters: int = 0) -> None:  # fmt: skip
        self.iterations += max(k, 1)

    # -- the caller's interface -----------------------------------------------------------------------------------

    def add(self, prompt: int, output: int, now: float) -> int:
        """A request of `prompt` tokens asking for `output` arrives at `now`; its id. Iterations that end by `now`
        are run first (`advance`), so the request joins the engines' state at `now`."""
        if prompt < 1 or output < 1:
            raise ServingConfigError("prompt_tokens", "a request has at least one prompt and one output token")
        if prompt + output > self.max_tokens:
            raise ServingConfigError(
                "max_tokens", f"{prompt} + {output} tokens is more than the {self.max_tokens} the engines serve"
            )
        self.advance(now)
        rid = len(self.prompt)
        for column in (self.prompt, self.output, self.left):
            column.append(output if column is not self.prompt else prompt)
        self.done.append(0)
        self.base.append(0.0)
        self.join_it.append(-1)
        self.version.append(0)
        self.reserve.append(prompt + output)
        self.sent.append(0)
        loads = [len(e.waiting) + len(e.prefilling) + e.decoding for e in self.engines]
        engine = self.engines[loads.index(min(loads))]
        engine.waiting.append(rid)
        self._wake(engine, now)
        return rid

    def next_time(self) -> float | None:
        """When the earliest iteration in flight ends (None: every engine idle). Engines given work are started
        first: everything that comes at a time is in once the caller asks what comes next."""
        self._flush(math.inf)
        return self.ends[0][0] if self.ends else None

    def advance(self, now: float) -> list[TokenEvent]:
        """Run every iteration that ends by `now`, each next one starting when the last ended; the tokens they made,
        in time order (also kept in `events` until `take`)."""
        if now < self.now:
            now = self.now
        start = len(self.events)
        while True:
            self._flush(min(now, self.ends[0][0]) if self.ends else now)
            if not (self.ends and self.ends[0][0] <= now):
                break
            end, i = heapq.heappop(self.ends)
            engine = self.engines[i]
            engine.finish(end)
            self._report(i, end)
            self._wake(engine, end)
        self.now = now
        return self.events[start:]

    def take(self) -> list[TokenEvent]:
        out, self.events = self.events, []
        return out

    # -- inside ---------------------------------------------------------------------------------------------------

    def _wake(self, engine: Engine, now: float) -> None:
        """Start `engine` at `now` once everything that comes at `now` is in (as the offline loop starts its idle
        engines only after every event of the same time, a closed loop's next request included)."""
        if not engine.busy and all(e is not engine for _, e in self.pending):
            self.pending.append((now, engine))

    def _flush(self, before: float) -> None:
        """Start the engines woken before `before` (all of them at `inf`), each at the time it was woken."""
        keep = []
        for at, engine in self.pending:
            if at < before or before == math.inf:
                if not engine.busy:
                    end = engine.start(at, at)  # a horizon of now: one iteration at a time
                    if end is not None:
                        heapq.heappush(self.ends, (end, self.index[id(engine)]))
            else:
                keep.append((at, engine))
        self.pending = keep

    def _generated(self, rid: int, engine: Engine) -> int:
        """Output tokens request `rid` has at the engine's current iteration (`Engine._join`: a decoding sequence
        gains `rate` tokens per iteration after its first)."""
        made = self.output[rid] - self.left[rid]
        if self.join_it[rid] >= 0 and self.left[rid] > 0:
            made += math.floor((engine.it - self.join_it[rid]) * engine.rate + 1e-9)
        return min(made, self.output[rid])

    def _report(self, i: int, now: float) -> None:
        engine, active = self.engines[i], self.active[i]
        active.update(self.firsts)  # their prompt completed this iteration: their first token
        self.firsts.clear()
        ending = set(self.ending)
        self.ending.clear()
        for rid in sorted(active | ending):
            made = self.output[rid] if rid in ending else self._generated(rid, engine)
            new = made - self.sent[rid]
            if new > 0 or rid in ending:
                self.sent[rid] = made
                self.events.append(TokenEvent(rid, now, max(new, 0), rid in ending))
            if rid in ending:
                active.discard(rid)
