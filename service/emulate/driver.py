"""The live engines (`roofline.serving.LiveServing`) on the event loop's clock: a request joins the simulation when
it arrives, and each of its tokens is handed to its response when the simulation makes it. One task advances the
simulation to the next iteration end and sleeps until then; a new request wakes it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from roofline.serving import LiveServing, TokenEvent


@dataclass
class Stream:
    """What one request has been given: `TokenEvent`s in order, the last with `done`."""

    rid: int
    arrival_s: float
    output: int
    queue: asyncio.Queue[TokenEvent] = field(default_factory=asyncio.Queue)


class Driver:
    def __init__(self, live: LiveServing, clock: Callable[[], float] = time.monotonic) -> None:
        self.live = live
        self.clock = clock
        self.t0 = clock()
        self.streams: dict[int, Stream] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.served = 0
        # Over the requests served: Σ simulated TTFT, TPOT and E2E (GET /health), so a client can tell the
        # simulation's times from what its own side adds.
        self.sums = {"ttft_s": 0.0, "tpot_s": 0.0, "e2e_s": 0.0}
        self.first: dict[int, float] = {}

    def now(self) -> float:
        return self.clock() - self.t0

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def submit(self, prompt: int, output: int) -> Stream:
        """A request arrives now; its stream of tokens. `ServingConfigError` when the engines cannot serve it."""
        now = self.now()
        self._deliver(self.live.advance(now))
        rid = self.live.add(prompt, output, now)
        stream = Stream(rid, now, output)
        self.streams[rid] = stream
        self.live.take()
        self.wake.set()
        return stream

    def _deliver(self, events: list[TokenEvent]) -> None:
        for e in events:
            stream = self.streams.get(e.rid)
            if stream is not None:
                stream.queue.put_nowait(e)
                first = self.first.setdefault(e.rid, e.time_s)
                if e.done:
                    del self.streams[e.rid]
                    del self.first[e.rid]
                    self.served += 1
                    self.sums["ttft_s"] += first - stream.arrival_s
                    self.sums["e2e_s"] += e.time_s - stream.arrival_s
                    self.sums["tpot_s"] += (e.time_s - first) / max(1, stream.output - 1)
        self.live.take()

    async def _run(self) -> None:
        while True:
            nxt = self.live.next_time()
            now = self.now()
            if nxt is not None and nxt <= now:
                self._deliver(self.live.advance(now))
                continue
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), None if nxt is None else nxt - now)
