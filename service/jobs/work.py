"""What a job computes, as the service's features describe it without knowing where it runs: independent pieces
(a function of the core or of `adapters` and its arguments, each a Ray task), a reduction of their values (a task
too), and the answer the synchronous endpoint would give made from it (in the runner's process). The runner
(`service.jobs.runner`) is the only module that knows Ray."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Piece:
    """`fn(*args)`, run as one task; `weight`: its units of work in the job's progress (a plan: candidates)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    weight: int = 1


@dataclass(frozen=True)
class Work:
    """The pieces; `reduce(values, *reduce_args)` on their values in the pieces' order (None: the one piece's value
    is the reduction); `finish(reduced)`: the synchronous endpoint's answer."""

    pieces: Sequence[Piece]
    finish: Callable[[Any], BaseModel]
    reduce: Callable[..., Any] | None = None
    reduce_args: tuple[Any, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return sum(p.weight for p in self.pieces)


@dataclass(frozen=True)
class Kind:
    """A kind of job: the synchronous endpoint's request schema, and `prepare(session, body, chunks)`, which reads
    what the request names from the database and splits the work into about `chunks` pieces."""

    schema: type[BaseModel]
    prepare: Callable[[Session, Any, int], Work]


def contiguous(groups: Sequence[Sequence[int]], chunks: int) -> list[list[int]]:
    """`groups` (each kept whole, in their order) cut into at most `chunks` runs of about equal size: neighbouring
    groups stay together (a plan's families on the same engines share the surfaces a task builds)."""
    total = sum(len(g) for g in groups)
    out: list[list[int]] = [[]]
    done = 0
    for g in groups:
        # Start a new chunk once this one holds its share (k × total / chunks for the k-th boundary).
        if out[-1] and done >= len(out) * total / max(1, chunks):
            out.append([])
        out[-1].extend(g)
        done += len(g)
    return [c for c in out if c]
