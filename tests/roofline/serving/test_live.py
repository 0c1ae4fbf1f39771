"""The live engines: requests that join while the engines run get the times the offline loop gives the same
arrivals, token by token (by hand on a flat surface, then a closed loop on the real one)."""

from __future__ import annotations

import numpy as np
import pytest

import roofline
from roofline.inference import InferenceRun, Parallelism, Workload
from roofline.serving import EngineSpec, LiveServing, Pool, Requests, Scheduler, ServingConfigError, simulate
from tests.roofline.models import LLAMA_3_8B
from tests.roofline.profiles import system

MS = 1e-3


def flat(kind: str = "continuous") -> Pool:
    return Pool(roofline.serving.IterationSurface.flat(MS), Scheduler(kind=kind, kv_blocks=10_000, block_size=1))


def test_tokens_come_at_each_iteration_end_by_hand() -> None:
    # As test_simulator's continuous batching by hand: two requests of 10 prompt tokens at t = 0, outputs 5 and 3,
    # every iteration 1 ms. Iteration 1 prefills both: each has its first token at 1 ms; iterations 2 and 3 give
    # each one more (2, 3 ms), request 1 ends with its 3rd at 3 ms; iterations 4 and 5 give request 0 its 4th and
    # 5th (4, 5 ms).
    live = LiveServing(flat(), 100)
    a, b = live.add(10, 5, 0.0), live.add(10, 3, 0.0)
    live.advance(1.0)
    events = [(e.rid, round(e.time_s / MS, 9), e.tokens, e.done) for e in live.take()]
    assert [e for e in events if e[0] == a] == [(a, 1, 1, False), (a, 2, 1, False), (a, 3, 1, False),
                                                 (a, 4, 1, False), (a, 5, 1, True)]  # fmt: skip
    assert [e for e in events if e[0] == b] == [(b, 1, 1, False), (b, 2, 1, False), (b, 3, 1, True)]
    assert live.next_time() is None


def test_a_request_that_comes_mid_iteration_waits_for_its_end() -> None:
    # Request 0 (10 + 4) starts at 0; request 1 comes at 0.5 ms, during the first iteration: it is admitted when
    # that iteration ends (1 ms) and its prompt runs in iteration 2 beside request 0's decode: its first token at
    # 2 ms.
    live = LiveServing(flat(), 100)
    live.add(10, 4, 0.0)
    late = live.add(10, 2, 0.5 * MS)
    live.advance(1.0)
    first = next(e for e in live.take() if e.rid == late)
    assert first.time_s == pytest.approx(2 * MS)


def test_a_closed_loop_run_live_matches_the_offline_simulation() -> None:
    # Llama-3-8B on one H100, chunked prefill, 8 clients of 512 + 128 tokens, 40 requests: the live engines, fed each
    # client's next request when its last ends, give each request the first token and end the offline loop gives.
    spec = EngineSpec(InferenceRun(LLAMA_3_8B, system("h100-sxm"), Workload.uniform(1, 1, 1), Parallelism()),
                      Scheduler(kind="chunked"))  # fmt: skip
    n, conc = 40, 8
    req = Requests(np.full(n, 512), np.full(n, 128), None, conc)
    ready = roofline.serving.prepare(spec, req)
    offline = simulate(req, ready.front)
    live = LiveServing(ready.front, 640)
    arrival = {live.add(512, 128, 0.0): 0.0 for _ in range(conc)}
    first: dict[int, float] = {}
    end: dict[int, float] = {}
    while (t := live.next_time()) is not None:
        for e in live.advance(t):
            first.setdefault(e.rid, e.time_s)
            if e.done:
                end[e.rid] = e.time_s
                if len(arrival) < n:
                    arrival[live.add(512, 128, e.time_s)] = e.time_s
    assert len(end) == n
    ttft = np.array([first[r] - arrival[r] for r in range(n)])
    e2e = np.array([end[r] - arrival[r] for r in range(n)])
    want_ttft = np.array(offline.first) - np.array(offline.arrival)
    want_e2e = np.array(offline.end) - np.array(offline.arrival)
    # The offline loop costs a pure-decode stretch at its mean context, the live engines each iteration at its own:
    # the same where the iteration time is linear in the context (the surface's interpolant between grid points).
    assert ttft.mean() == pytest.approx(want_ttft.mean(), rel=1e-3)
    assert e2e.mean() == pytest.approx(want_e2e.mean(), rel=1e-3)


def test_a_request_past_the_engines_context_is_refused() -> None:
    live = LiveServing(flat(), 100)
    with pytest.raises(ServingConfigError) as err:
        live.add(90, 20, 0.0)
    assert err.value.field == "max_tokens"
