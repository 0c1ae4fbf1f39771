"""The sharing columns of a request trace (issue 41): each request's prefix hashes (Mooncake's `hash_ids`, or
Ridgeline's `prefix_hashes`), its session and turn, its LoRA adapter; collected as a file is read, checked, stored
after the three columns (`adapters._traces`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from adapters._errors import InvalidField
from schemas import limits

SHARING_MAGIC = b"RLS1"
ADAPTER_MAGIC = b"RLS2"  # the same columns and an adapter column after them
MOONCAKE_BLOCK = 512  # Mooncake's hash_ids are blocks of 512 tokens (FAST25-release/traces README)
MAX_HASH = (1 << 63) - 1


@dataclass(frozen=True)
class TraceSharing:
    """What a trace's requests share: request i's prompt blocks `hashes[starts[i]:starts[i + 1]]` of `block` tokens
    (none: `starts` all 0), and its `session` and `turn` (−1: none); its LoRA `adapter` (−1: none; None: no
    request names one)."""

    hashes: NDArray[np.int64]
    starts: NDArray[np.int64]
    block: int
    session: NDArray[np.int64]
    turn: NDArray[np.int64]
    adapter: NDArray[np.int64] | None = None

    def raw(self) -> bytes:
        magic = SHARING_MAGIC if self.adapter is None else ADAPTER_MAGIC
        head = magic + self.block.to_bytes(8, "little") + len(self.hashes).to_bytes(8, "little")
        columns = [self.starts, self.hashes, self.session, self.turn]
        if self.adapter is not None:
            columns.append(self.adapter)
        return head + b"".join(np.ascontiguousarray(a, dtype="<i8").tobytes() for a in columns)

    @staticmethod
    def decode(raw: bytes, n: int) -> TraceSharing:
        block = int.from_bytes(raw[4:12], "little")
        count = int.from_bytes(raw[12:20], "little")
        at = 20

        def column(size: int) -> NDArray[np.int64]:
            nonlocal at
            out = np.frombuffer(raw, dtype="<i8", count=size, offset=at).astype(np.int64)
            at += 8 * size
            return out

        starts, hashes, session, turn = column(n + 1), column(count), column(n), column(n)
        adapter = column(n) if raw.startswith(ADAPTER_MAGIC) else None
        return TraceSharing(hashes, starts, block, session, turn, adapter)


@dataclass
class SharedColumns:
    """Sharing columns as they are read: per request its hashes (None: none given), session and turn (None)."""

    block: int = MOONCAKE_BLOCK
    hashes: list[list[int] | None] = field(default_factory=list)
    sessions: list[int | None] = field(default_factory=list)
    turns: list[int | None] = field(default_factory=list)
    adapters: list[int | None] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return all(h is None for h in self.hashes) and all(
            v is None for v in (*self.sessions, *self.turns, *self.adapters)
        )

    def add(self, i: int, doc: dict[str, Any], keys: tuple[str, str, str], where: str) -> None:
        """Request i's columns from a parsed line or row (`keys`: its hashes', session's and turn's names)."""
        hashes = doc.get(keys[0])
        if hashes is not None and (
            not isinstance(hashes, list)
            or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_HASH for h in hashes)
        ):
            raise InvalidField(f"body.requests.{i}.prefix_hashes",
                               f"{where}{keys[0]} is a list of whole numbers 0 … 2⁶³ − 1")  # fmt: skip
        self.hashes.append(hashes)
        columns = ((keys[1], self.sessions, "session"), (keys[2], self.turns, "turn"), ("adapter", self.adapters,
                   "adapter"))  # fmt: skip
        for key, column, name in columns:
            value = doc.get(key)
            if value is not None and value != "":
                try:
                    number = int(value)
                except (TypeError, ValueError):
                    number = -1
                if isinstance(value, bool) or not 0 <= number <= MAX_HASH or str(value).strip() != str(number):
                    raise InvalidField(f"body.requests.{i}.{name}", f"{where}{key} {value!r} is not a whole number "
                                       "0 … 2⁶³ − 1")  # fmt: skip
                value = number
            else:
                value = None
            column.append(value)

    def check(self, prompts: Sequence[int], field_: str, where: Callable[[int], str]) -> TraceSharing:
        """The checked columns: no more hashes than the prompt's blocks (⌈prompt / block⌉), at most
        `limits.MAX_SHARED_BLOCKS` in all, a session's turns in order."""
        n = len(prompts)
        starts = np.zeros(n + 1, dtype=np.int64)
        total = 0
        for i, hashes in enumerate(self.hashes):
            count = len(hashes) if hashes else 0
            most = -(-prompts[i] // self.block)
            if count > most:
                raise InvalidField(
                    f"{field_}.{i}.prefix_hashes",
                    f"{where(i)}{count} block hashes for a prompt of {prompts[i]} tokens: at most {most} "
                    f"(⌈prompt / {self.block}⌉)",
                )
            total += count
            starts[i + 1] = total
        if total > limits.MAX_SHARED_BLOCKS:
            raise InvalidField(field_, f"{total:,} block hashes in all: at most {limits.MAX_SHARED_BLOCKS:,}")
        flat = [h for hashes in self.hashes if hashes for h in hashes]
        session = np.array([-1 if s is None else s for s in self.sessions] or [-1] * n, dtype=np.int64)
        turn = np.array([-1 if t is None else t for t in self.turns] or [-1] * n, dtype=np.int64)
        last: dict[int, int] = {}
        for i, (s, t) in enumerate(zip(session.tolist(), turn.tolist(), strict=True)):
            if s < 0:
                if t >= 0:
                    raise InvalidField(f"{field_}.{i}.session", f"{where(i)}a turn needs its session")
                continue
            if t >= 0 and s in last and t <= last[s]:
                raise InvalidField(f"{field_}.{i}.turn", f"{where(i)}turn {t} of session {s} comes after turn "
                                   f"{last[s]}: a session's turns arrive in order")  # fmt: skip
            last[s] = max(t, last.get(s, -1))
        adapter = None
        if any(a is not None for a in self.adapters):
            adapter = np.array([-1 if a is None else a for a in self.adapters], dtype=np.int64)
        return TraceSharing(np.array(flat, dtype=np.int64), starts, self.block, session, turn, adapter)


def shared_columns(requests: Sequence[Any], block: int = MOONCAKE_BLOCK) -> SharedColumns | None:
    """The sharing columns of a JSON document's requests (`TraceRequest`s; None when none shares)."""
    if all(r.prefix_hashes is None and r.session is None and r.turn is None and r.adapter is None for r in requests):
        return None
    return SharedColumns(block, [r.prefix_hashes for r in requests], [r.session for r in requests],
                         [r.turn for r in requests], [r.adapter for r in requests])  # fmt: skip


def request_fields(sharing: TraceSharing | None, i: int) -> dict[str, Any]:
    """`TraceRequest`'s sharing fields of a stored trace's request i."""
    if sharing is None:
        return {}
    a, b = int(sharing.starts[i]), int(sharing.starts[i + 1])
    session, turn = int(sharing.session[i]), int(sharing.turn[i])
    adapter = int(sharing.adapter[i]) if sharing.adapter is not None else -1
    return {
        "prefix_hashes": sharing.hashes[a:b].tolist() if b > a else None,
        "session": session if session >= 0 else None,
        "turn": turn if turn >= 0 else None,
        "adapter": adapter if adapter >= 0 else None,
    }
