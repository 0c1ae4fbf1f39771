"""Prefix caching: an engine's KV blocks named by their prefix, kept after their request ends and evicted least
recently used among the blocks no running request holds, with an optional host-memory tier behind them.

A request's prompt is a chain of block hashes, one per full block of `hash_block` tokens, each naming its block and
every block before it (vLLM hashes each full block with its parent's hash: `hash_block_tokens` in
vllm/v1/core/kv_cache_utils.py; SGLang's radix tree shares the same prefixes). A request reuses the longest prefix of
its chain found in the cache, at most its prompt less one token (vLLM computes at least the last token:
`max_cache_hit_length = request.num_tokens - 1` in vllm/v1/core/kv_cache_manager.py). Blocks a request holds are
freed when it ends, in reverse order, to the tail of the free queue, and a new block is taken from its head, evicting
the head's cached block (vLLM's `FreeKVCacheBlockQueue` in vllm/v1/core/kv_cache_utils.py and `BlockPool.free_blocks`
/ `get_new_blocks` in vllm/v1/core/block_pool.py): the least recently used block goes first, a chain's tail before
its head. With a host tier, an evicted block moves to host memory (an LRU of `host_blocks`) and a later hit on it
comes back over the host link (vLLM's CPU offloading connector, SGLang's HiCache, Mooncake's store).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from itertools import compress, islice, repeat, takewhile
from operator import add, not_, sub


class PrefixCache:
    """One engine's cache, counted in hash blocks of `tokens` tokens, each `unit` of the engine's KV blocks. The walks
    over a request's chain run in C (`itertools.takewhile`, `map`, dict updates): a chain is tens to hundreds of
    blocks, and every request walks its own a few times."""

    def __init__(self, tokens: int, block_size: int, host_blocks: int = 0) -> None:
        self.tokens = tokens
        self.unit = -(-tokens // block_size)
        self.cached: dict[int, int] = {}  # on device: running requests holding the block (0: in the free queue)
        self.free: OrderedDict[int, None] = OrderedDict()  # on device, held by none: the free queue, oldest first
        self.host: OrderedDict[int, None] = OrderedDict()
        self.host_cap = host_blocks // self.unit
        self.held: dict[int, list[int]] = {}  # request → cached blocks it holds, in chain order
        self.own: dict[int, int] = {}  # request → engine blocks it holds privately (freed when it ends)
        self.start: dict[int, int] = {}  # request → chain blocks reused (device and host)
        self.loads: dict[int, int] = {}  # request → tokens to bring back from the host before its prefill
        # what happened, in all
        self.prompt_tokens = 0  # prompt tokens of admitted requests
        self.hit_tokens = 0  # of which served from the cache (device or host)
        self.lookup_blocks = 0  # full prompt blocks looked up
        self.hit_blocks = 0
        self.host_hit_blocks = 0
        self.evictions = 0  # device blocks evicted (to the host tier when there is one)
        self.host_s = 0.0  # seconds spent bringing blocks back from the host

    def match(self, chain: list[int], prompt: int) -> tuple[int, int, int]:
        """Blocks of `chain` reusable for a prompt of `prompt` tokens: the longest prefix on the device, the longest
        continuation of it in the host tier, and how many of the device's are in the free queue (their engine
        blocks count as free)."""
        head = chain[: min(len(chain), (prompt - 1) // self.tokens)]
        cached = self.cached
        hits = list(takewhile(cached.__contains__, head))
        k = len(hits)
        queued = list(map(cached.__getitem__, hits)).count(0)
        k2 = len(list(takewhile(self.host.__contains__, head[k:]))) if self.host else 0
        return k, k2, queued

    def device_prefix(self, chain: list[int], prompt: int) -> int:
        """Device blocks of `chain` cached (the router's view of this engine)."""
        return self.match(chain, prompt)[0]

    def take(self, rid: int, chain: list[int], prompt: int, k: int, k2: int, blocks: int) -> int:
        """Admit request `rid`: hold its `k` device hits, bring back `k2` host hits; `blocks`: the engine blocks it
        needs in all. Returns the engine blocks it takes out of the free count (hits already held by another
        request are shared, not taken)."""
        cached, free, unit = self.cached, self.free, self.unit
        held = chain[:k]
        counts = list(map(cached.__getitem__, held))
        queued = list(compress(held, map(not_, counts)))
        deque(map(free.__delitem__, queued), maxlen=0)
        cached.update(zip(held, map(add, counts, repeat(1)), strict=True))
        if k2:
            loaded = chain[k : k + k2]
            deque(map(self.host.__delitem__, loaded), maxlen=0)
            cached.update(dict.fromkeys(loaded, 1))
            held += loaded
            self.loads[rid] = k2 * self.tokens
        self.held[rid] = held
        own = max(blocks - (k + k2) * unit, 0)  # its new blocks, the host's blocks' device copies counted as held
        self.own[rid] = own
        self.start[rid] = k + k2
        self.prompt_tokens += prompt
        self.hit_tokens += (k + k2) * self.tokens
        self.lookup_blocks += prompt // self.tokens
        self.hit_blocks += k + k2
        self.host_hit_blocks += k2
        return len(queued) * unit + own + k2 * unit

    def evict(self, empty: int, need: int) -> int:
        """Evict from the free queue's head until `need` engine blocks are empty (`empty` are); the blocks now
        empty."""
        free, unit = self.free, self.unit
        if empty >= need or not free:
            return empty
        victims = list(islice(free, -(-(need - empty) // unit)))  # the queue's head, oldest first
        deque(map(free.__delitem__, victims), maxlen=0)
        deque(map(self.cached.__delitem__, victims), maxlen=0)
        self.evictions += len(victims)
        if self.host_cap:
            host = self.host
            deque(map(host.__setitem__, victims, repeat(None)), maxlen=0)
            if len(host) > self.host_cap:
                deque(map(host.__delitem__, list(islice(host, len(host) - self.host_cap))), maxlen=0)
        return empty + len(victims) * unit

    def register(self, rid: int, chain: list[int], upto: int) -> None:
        """Request `rid` has computed its chain's first `upto` blocks: those it does not hold yet become cached
        (a block another request cached meanwhile stays the request's own copy)."""
        held = self.held.get(rid)
        if held is None:
            return
        cached, unit = self.cached, self.unit
        start, end = self.start[rid], min(upto, len(chain))
        own = self.own[rid]
        new = [h for h in chain[start:end] if h not in cached][: own // unit]
        if new:
            if self.host:
                deque(map(self.host.pop, new, repeat(None)), maxlen=0)
            cached.update(dict.fromkeys(new, 1))
            held += new
            self.own[rid] = own - len(new) * unit
        self.start[rid] = max(start, end)

    def release(self, rid: int) -> int:
        """Request `rid` ends (or is preempted): its cached blocks go to the free queue's tail, last block first;
        the engine blocks freed (its own and the cached ones no other request holds)."""
        held = self.held.pop(rid, None)
        if held is None:
            return 0
        self.start.pop(rid, None)
        self.loads.pop(rid, None)
        cached = self.cached
        counts = list(map(sub, map(cached.__getitem__, held), repeat(1)))
        cached.update(zip(held, counts, strict=True))
        zero = list(compress(reversed(held), map(not_, reversed(counts))))
        deque(map(self.free.__setitem__, zero, repeat(None)), maxlen=0)  # OrderedDict.update loops in Python
        return self.own.pop(rid) + len(zero) * self.unit

    @property
    def free_units(self) -> int:
        """Engine blocks the free queue's cached blocks hold."""
        return len(self.free) * self.unit


@dataclass(frozen=True)
class CacheStats:
    """One engine's prefix cache over a run (`roofline.serving._prefix`)."""

    prompt_tokens: int  # prompt tokens of the requests it admitted
    hit_tokens: int  # of which reused from its cache (device or host tier)
    lookup_blocks: int  # full prompt blocks looked up
    hit_blocks: int
    host_hit_blocks: int  # of which brought back from the host tier
    evictions: int
    host_s: float  # seconds spent bringing blocks back from the host


def cache_stats(cache: PrefixCache | None) -> CacheStats:
    if cache is None:
        return CacheStats(0, 0, 0, 0, 0, 0, 0.0)
    return CacheStats(cache.prompt_tokens, cache.hit_tokens, cache.lookup_blocks, cache.hit_blocks,
                      cache.host_hit_blocks, cache.evictions, cache.host_s)  # fmt: skip


def replay(
    chains: list[list[int]], prompts: list[int], capacity: int, block: int, nodes: int = 1,
    router: str = "round_robin", shared_host: int = 0, match_share: float = 0.5,
) -> tuple[float, float]:  # fmt: skip
    """Hit rates (of prompt tokens, of full prompt blocks) of requests replayed in order with no compute, as the
    Mooncake paper measured its traces (Qin et al., FAST 2025, §4 Figures 9 and 10): `nodes` LRU caches of `capacity`
    tokens in blocks of `block`, each request looked up on the node the router picks (`round_robin`, or
    `prefix_aware`: the node holding the longest prefix when it is over `match_share` of the prompt's blocks, else
    the next in turn: SGLang router's `cache_threshold` 0.5) and its blocks cached there; `shared_host`: tokens of
    one host tier shared by every node, every block written through to it (vLLM's offloading connector and LMCache
    store blocks as they are computed), serving what a node's own cache misses."""
    caps = capacity // block
    caches: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(nodes)]
    host: OrderedDict[int, None] = OrderedDict()
    host_cap = shared_host // block
    hit_tokens = total_tokens = hit_blocks = total_blocks = 0
    for i, (chain, prompt) in enumerate(zip(chains, prompts, strict=True)):
        full = min(len(chain), prompt // block)
        node = i % nodes
        if router == "prefix_aware" and nodes > 1:
            best = 0
            for n, cache in enumerate(caches):
                k = 0
                while k < full and chain[k] in cache:
                    k += 1
                if k > best:
                    best, node = k, n
            if best <= match_share * full:
                node = i % nodes
        cache = caches[node]
        k = 0
        while k < full and chain[k] in cache:
            cache.move_to_end(chain[k])
            k += 1
        j = k
        while j < full and chain[j] in host:
            j += 1
        hit_tokens += j * block
        hit_blocks += j
        total_tokens += prompt
        total_blocks += full
        for h in chain[k:full]:
            cache[h] = None
        while len(cache) > caps:
            cache.popitem(last=False)
        if host_cap:  # written through: every block a node holds is stored in the host tier too
            for h in chain[:full]:
                host[h] = None
                host.move_to_end(h)
            while len(host) > host_cap:
                host.popitem(last=False)
    return hit_tokens / max(total_tokens, 1), hit_blocks / max(total_blocks, 1)
