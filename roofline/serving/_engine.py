"""One engine's scheduler, iteration by iteration, as vLLM / TensorRT-LLM / SGLang run it (see `Scheduler`).

The decoding batch is held as aggregates, never as a per-sequence loop: D sequences whose next step attends to C
keys in all; a heap of the iteration at which each ends. Between events (an arrival, a request ending, the KV pool
filling up), iterations are pure decode and differ only in C, which grows by D per iteration: the engine runs them
as one stretch of k iterations costed at the stretch's mean context (exact where the iteration time is linear in
the context, as the surface's interpolant is between grid points).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Protocol

from roofline.serving._config import Scheduler
from roofline.serving._lora import Adapters
from roofline.serving._prefix import PrefixCache
from roofline.serving._surface import IterationSurface

INF = math.inf


class Loop(Protocol):
    """What an engine sees of the event loop: per-request state (lists indexed by request) and its callbacks."""

    prompt: list[int]
    done: list[int]
    left: list[int]
    base: list[float]
    join_it: list[int]
    version: list[int]
    reserve: list[int]
    preemptions: int
    hash_block: int
    adapter: list[int] | None
    adapter_rank: int

    def chain(self, rid: int) -> list[int]: ...

    def admitted(self, rid: int, now: float) -> None: ...
    def first_token(self, rid: int, now: float) -> None: ...
    def finished(self, rid: int, now: float, engine: Engine) -> None: ...
    def handoff(self, rid: int, now: float) -> None: ...
    def record(self, now: float, seconds: float, k: int, decoding: int, tokens: int, prefilling: int, kv: float,
               prefill_share: float, context: float, width: int = 1, adapters: int = 0) -> None: ...  # fmt: skip


class Engine:
    """`role`: "both" (aggregated), "prefill" or "decode" (a disaggregated pool's worker)."""

    def __init__(self, sim: Loop, surface: IterationSurface, sched: Scheduler, role: str, launch_s: float) -> None:
        self.sim, self.surface, self.sched, self.role = sim, surface, sched, role
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []  # admitted, prompt not yet all computed (in admission order)
        self.heap: list[tuple[int, int, int]] = []  # (iteration of its last token, version, request)
        self.order: list[int] = []  # decoding requests in admission order (preemption takes the newest)
        self.decoding = 0
        self.context = 0.0  # keys the decoding sequences' next step attends to, in all
        self.it = 0
        self.block = sched.block_size
        self.pool_tokens = float(sched.kv_blocks * sched.block_size)
        self.free_blocks = sched.kv_blocks
        self.held = 0.0  # on demand: prompt tokens of admitted prefills
        # An eager iteration takes at least its kernels' launches; with CUDA graphs only pure-decode iterations are
        # replayed, so an iteration with prefill still runs eagerly (`Scheduler.cuda_graphs`).
        self.eager_floor = surface.kernels * launch_s
        self.launch_floor = 0.0 if sched.cuda_graphs else self.eager_floor
        # speculative decoding: positions a decoding sequence takes in a pass, tokens it gains per iteration
        self.spec = sched.speculation
        self.width = 1 if self.spec is None else self.spec.width
        self.rate = 1.0 if self.spec is None else self.spec.rate
        self.busy = False
        self.static_batch = False
        # the iteration in flight
        self.k = 0
        self.chunks: list[tuple[int, int]] = []  # (request, tokens) computed this iteration
        # prefix caching (prefill engines only: a decode worker receives its requests' KV cache whole)
        self.cache = (
            PrefixCache(sim.hash_block, sched.block_size, sched.host_cache_blocks)
            if sched.prefix_caching and sim.hash_block and role != "decode"
            else None
        )
        self.probe = (-1, 0, 0, 0)  # (request, device hits, host hits, hits in the free queue) of the last check
        # LoRA adapters (requests that name one, on an engine that serves them)
        self.adapters = (
            Adapters(sched.lora, sim.adapter_rank) if sched.lora is not None and sim.adapter is not None else None
        )

    # -- KV cache ------------------------------------------------------------------------------------------------

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def can_admit(self, rid: int) -> bool:
        sim = self.sim
        if self.sched.kv_policy == "reserve":
            need = self.blocks(sim.reserve[rid])
            if self.cache is None:
                return need <= self.free_blocks
            k, _, queued = self._match(rid, True)
            # its hits already held by running requests are shared; the free queue's hits leave it
            return need - k * self.cache.unit <= self.free_blocks - queued * self.cache.unit
        if self.cache is not None:
            self._match(rid, True)
        used = self._used_tokens()
        need = sim.prompt[rid] if self.role != "decode" else sim.prompt[rid] + 1
        return used + need + 0.01 * self.pool_tokens <= self.pool_tokens  # vLLM's 1 % watermark

    def _used_tokens(self) -> float:
        """On demand: tokens the pool holds, half a block of rounding per sequence."""
        return self.context + self.held + (self.decoding + len(self.prefilling)) * self.block / 2.0

    def _match(self, rid: int, fresh: bool = False) -> tuple[int, int, int]:
        """Cached blocks (device, then host) a waiting request would reuse, kept from its admission check."""
        assert self.cache is not None
        if fresh or self.probe[0] != rid:
            self.probe = (rid, *self.cache.match(self.sim.chain(rid), self.sim.prompt[rid]))
        return self.probe[1], self.probe[2], self.probe[3]

    def cached_tokens(self, rid: int) -> int:
        """Prompt tokens the cache would serve a waiting request (after its admission check)."""
        if self.cache is None:
            return 0
        k, k2, _ = self._match(rid)
        return (k + k2) * self.cache.tokens

    def take(self, rid: int) -> None:
        sim, cache = self.sim, self.cache
        if cache is not None:
            k, k2, _ = self._match(rid)
            self.probe = (-1, 0, 0, 0)
            blocks = self.blocks(sim.reserve[rid] if self.sched.kv_policy == "reserve" else sim.prompt[rid])
            taken = cache.take(rid, sim.chain(rid), sim.prompt[rid], k, k2, blocks)
            sim.done[rid] = (k + k2) * cache.tokens
            if self.sched.kv_policy == "reserve":
                # its new blocks (those of its host hits included) come from the empty ones, evicting the free
                # queue's head as needed
                self.free_blocks -= taken
                alloc = blocks - k * cache.unit
                cache.evict(self.free_blocks + alloc - cache.free_units, alloc)
            else:
                self.held += sim.prompt[rid]
                self.trim()
            return
        if self.sched.kv_policy == "reserve":
            self.free_blocks -= self.blocks(sim.reserve[rid])
        elif self.role != "decode":
            self.held += sim.prompt[rid]

    def trim(self) -> None:
        """On demand: the free queue's cached blocks keep only the room the running requests leave."""
        if self.cache is not None and self.cache.free:
            room = int((self.pool_tokens - self._used_tokens()) // self.block)
            if self.cache.free_units > room:
                self.cache.evict(0, self.cache.free_units - max(room, 0))

    def release(self, rid: int) -> None:
        if self.adapters is not None:
            self.adapters.leave(self._adapter(rid))
        cache = self.cache
        if cache is not None:  # what it computed stays cached: its prompt's blocks, and its answer's once it ends
            sim = self.sim
            upto = (sim.reserve[rid] if self.role == "both" else sim.prompt[rid]) // cache.tokens
            cache.register(rid, sim.chain(rid), upto)
            freed = cache.release(rid)
            if self.sched.kv_policy == "reserve":
                self.free_blocks += freed
            return
        if self.sched.kv_policy == "reserve":
            self.free_blocks += self.blocks(self.sim.reserve[rid])

    def kv_used(self) -> float:
        if self.sched.kv_policy == "reserve":
            return 1.0 - self.free_blocks / max(1, self.sched.kv_blocks)
        used = self._used_tokens()
        return min(1.0, used / self.pool_tokens)

    # -- the iteration -------------------------------------------------------------------------------------------

    def start(self, now: float, horizon: float) -> float | None:
        """Plan the next iteration (or stretch of pure-decode iterations) at `now`; its end time, or None when idle."""
        sim, sched, surf = self.sim, self.sched, self.surface
        chunks: list[tuple[int, int]] = []
        if self.role == "decode":
            self._admit_decode()
        elif sched.kind == "static":
            if self.decoding == 0 and not self.prefilling:
                self._release_held()
                while self.waiting and len(self.prefilling) < sched.max_num_seqs:
                    rid = self.waiting[0]
                    if not self._lora_fits(rid):
                        continue
                    if not self.can_admit(rid):
                        break
                    self._admitted(self.waiting.popleft(), now)
                chunks = [(rid, sim.prompt[rid] - sim.done[rid]) for rid in self.prefilling]
        else:
            budget = sched.max_num_batched_tokens - self.decoding * self.width
            for rid in self.prefilling:
                if budget <= 0:
                    break
                left = sim.prompt[rid] - sim.done[rid]
                q = left if sched.kind == "continuous" else min(left, budget)
                chunks.append((rid, q))
                budget -= q
            seqs = self.decoding + len(self.prefilling)
            self._release_held()
            while self.waiting and budget > 0 and seqs < sched.max_num_seqs:
                rid = self.waiting[0]
                if not self._lora_fits(rid):
                    continue
                if not self.can_admit(rid):
                    break
                p = sim.prompt[rid] - self.cached_tokens(rid)  # a cached prefix is not computed again
                if sched.kind == "continuous" and p > budget and (chunks or self.decoding):
                    break
                self.waiting.popleft()
                self._admitted(rid, now)
                q = p if sched.kind == "continuous" else min(p, budget)
                chunks.append((rid, q))
                budget -= q
                seqs += 1
        d = self.decoding
        if not chunks and d == 0:
            self.busy = False
            return None
        self.busy, self.chunks = True, chunks
        over = sched.iteration_overhead_s
        if not chunks:
            if sched.kv_policy == "on_demand":
                self.trim()
                self._preempt_to_fit()
                d = self.decoding
                if d == 0:
                    return self.start(now, horizon)
            k = self._top() - self.it
            step = d * self.rate  # keys the batch adds per iteration
            lora = self.adapters
            if lora is not None:  # the LoRA kernels of each iteration
                over += lora.kernel_s(float(d * self.width))
            t1 = max(surf.decode_time(d, self.context, self.spec), self.launch_floor) + over
            if horizon < INF:
                k = min(k, max(1, math.ceil((horizon - now) / t1)))
            if sched.kv_policy == "on_demand":
                used = self.context + self.held + d * self.block / 2.0
                k = min(k, max(1, int((self.pool_tokens - used) // step)))
            if k > 1:
                t1 = max(surf.decode_time(d, self.context + step * (k - 1) / 2.0, self.spec), self.launch_floor) + over
            self.k = k
            duration = k * t1
            if lora is not None:  # adapters activated for requests handed to a decode worker load first
                duration += lora.loads_s()
            sim.record(now, duration, k, d, 0, len(self.prefilling), self.kv_used(), 0.0,
                       self.context + step * (k - 1) / 2.0, self.width, self._active())  # fmt: skip
            return now + duration
        self.k = 1 if d else 0
        done, prompt = sim.done, sim.prompt
        tokens = ending = 0
        pieces = []
        for rid, q in chunks:
            c = done[rid]
            tokens += q
            pieces.append((float(q), float(c)))
            if c + q >= prompt[rid]:
                ending += 1
        t = surf.time(float(tokens), pieces, float(d), self.context, float(d * self.width + ending), self.spec)
        duration = max(t, self.eager_floor) + over
        if self.adapters is not None:  # adapters not in a slot load before the pass; the pass runs the LoRA kernels
            duration += self.adapters.loads_s() + self.adapters.kernel_s(float(tokens + d * self.width))
        if self.cache is not None and self.cache.loads:  # host-tier hits come back before their prefill
            load = sum(self.cache.loads.pop(rid, 0) for rid, _ in chunks) * sched.host_s_per_token
            duration += load
            self.cache.host_s += load
        sim.record(now, duration, self.k, d, tokens, len(self.prefilling), self.kv_used(),
                   tokens / (tokens + d * self.width), self.context, self.width, self._active())  # fmt: skip
        return now + duration

    def finish(self, now: float) -> None:
        """End the iteration in flight at `now`: decode progress, requests that end, prefills that complete."""
        sim = self.sim
        d, k = self.decoding, self.k
        if d and k:
            self.it += k
            self.context += d * k * self.rate
            heap = self.heap
            while heap and heap[0][0] <= self.it:
                _, version, rid = heapq.heappop(heap)
                if version != sim.version[rid]:
                    continue
                self.decoding -= 1
                self.context -= sim.base[rid] + self.it * self.rate
                sim.left[rid] = 0
                self.release(rid)
                sim.finished(rid, now, self)
        for rid, q in self.chunks:
            sim.done[rid] += q
            if sim.done[rid] < sim.prompt[rid]:
                continue
            self.prefilling.remove(rid)
            if self.cache is not None:
                self.cache.register(rid, sim.chain(rid), sim.prompt[rid] // self.cache.tokens)
            if self.sched.kv_policy == "on_demand":
                self.held -= sim.prompt[rid]
            sim.first_token(rid, now)
            sim.left[rid] -= 1
            if sim.left[rid] <= 0:  # a one-token answer ends with its prompt, on any engine
                self.release(rid)
                sim.finished(rid, now, self)
            elif self.role == "prefill":
                self.release(rid)
                sim.handoff(rid, now)
            else:
                self._join(rid)
        self.chunks = []
        self.k = 0
        self.busy = False

    # -- helpers -------------------------------------------------------------------------------------------------

    def _adapter(self, rid: int) -> int:
        adapter = self.sim.adapter
        return adapter[rid] if adapter is not None else -1

    def _active(self) -> int:
        return len(self.adapters.active) if self.adapters is not None else 0

    def _lora_fits(self, rid: int) -> bool:
        """Whether the head of the queue may join the batch under `max_loras` (else it is held back)."""
        lora = self.adapters
        return lora is None or lora.fits_or_hold(self.waiting, self._adapter(rid))

    def _release_held(self) -> None:
        if self.adapters is not None:
            self.adapters.release_held(self.waiting)

    def _admitted(self, rid: int, now: float) -> None:
        if self.adapters is not None:
            self.adapters.join(self._adapter(rid))
        self.take(rid)
        self.prefilling.append(rid)
        self.sim.admitted(rid, now)

    def _join(self, rid: int) -> None:
        """A request whose prompt is computed starts decoding next iteration: its next step attends to p + 1 keys,
        and it ends after its tokens left over the tokens an iteration gains (speculative decoding: 1 + a)."""
        sim = self.sim
        p = sim.prompt[rid]
        self.decoding += 1
        self.context += p + 1
        sim.base[rid] = p + 1 - self.it * self.rate
        sim.join_it[rid] = self.it
        iterations = sim.left[rid] if self.spec is None else math.ceil(sim.left[rid] / self.rate - 1e-9)
        heapq.heappush(self.heap, (self.it + iterations, sim.version[rid], rid))
        self.order.append(rid)

    def _admit_decode(self) -> None:
        """A disaggregated decode worker: requests arrive with their KV cache; admitted while there is room."""
        self._release_held()
        while self.waiting and self.decoding < self.sched.max_num_seqs:
            if not self._lora_fits(self.waiting[0]):
                continue
            if not self.can_admit(self.waiting[0]):
                break
            rid = self.waiting.popleft()
            if self.adapters is not None:
                self.adapters.join(self._adapter(rid))
            self.take(rid)
            self._join(rid)

    def _top(self) -> int:
        heap, version = self.heap, self.sim.version
        while heap and heap[0][1] != version[heap[0][2]]:
            heapq.heappop(heap)
        return heap[0][0]

    def _preempt_to_fit(self) -> None:
        """On demand: while the next step would overflow the pool, the newest decoding request is preempted; it
        returns to the head of the queue and recomputes its prompt and tokens so far (vLLM's recompute)."""
        sim = self.sim
        while (
            self.decoding
            and self.context + self.held + self.decoding * (self.rate + self.block / 2.0) > self.pool_tokens
        ):
            rid = self.order.pop()
            if sim.version[rid] < 0 or sim.left[rid] <= 0 or sim.join_it[rid] < 0:
                continue
            if self.decoding == 1:
                break  # one request always runs: admission checked that a prompt fits
            g = int((self.it - sim.join_it[rid]) * self.rate)  # tokens it has generated (fewer than it needs)
            self.decoding -= 1
            self.context -= sim.base[rid] + self.it * self.rate
            sim.left[rid] -= g
            sim.prompt[rid] += g + 1
            sim.done[rid] = 0
            sim.version[rid] += 1
            sim.join_it[rid] = -1
            sim.preemptions += 1
            if self.cache is not None:
                self.cache.release(rid)
            if self.adapters is not None:
                self.adapters.leave(self._adapter(rid))
            self.waiting.appendleft(rid)
