"""Loads that share prompt prefixes and what prefix caching did (issue 41): the routers, prefix groups and their
popularity, sessions' think time (`schemas.serving.Load`), and the cache counts of a serving estimate."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field, model_validator

from schemas import limits
from schemas.common import InputModel


class Router(StrEnum):
    round_robin = "round_robin"
    least_loaded = "least_loaded"
    prefix_aware = "prefix_aware"


class Popularity(StrEnum):
    uniform = "uniform"
    zipf = "zipf"


class ThinkKind(StrEnum):
    fixed = "fixed"
    exponential = "exponential"
    uniform = "uniform"


class PrefixGroups(InputModel):
    """`count` groups, each with its own prefix of `load.prefix_tokens`, each request in one group, drawn with a
    popularity: uniform, or Zipf (group k chosen ∝ k^−zipf_exponent)."""

    count: Annotated[int, Field(ge=1, le=limits.MAX_PREFIX_GROUPS)]
    popularity: Popularity = Popularity.uniform
    zipf_exponent: Annotated[float, Field(gt=0, le=10)] = 1.0


class ThinkTime(InputModel):
    """Seconds between a turn's answer and the session's next turn: fixed (`value`), exponential (`mean`) or
    uniform in [`low`, `high`]."""

    kind: ThinkKind = ThinkKind.fixed
    value: Annotated[float, Field(ge=0, le=limits.MAX_SECONDS)] | None = None
    mean: Annotated[float, Field(ge=0, le=limits.MAX_SECONDS)] | None = None
    low: Annotated[float, Field(ge=0, le=limits.MAX_SECONDS)] | None = None
    high: Annotated[float, Field(ge=0, le=limits.MAX_SECONDS)] | None = None

    @model_validator(mode="after")
    def _parameters(self) -> ThinkTime:
        need = {ThinkKind.fixed: ("value",), ThinkKind.exponential: ("mean",), ThinkKind.uniform: ("low", "high")}
        missing = [name for name in need[self.kind] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"kind {self.kind.value} needs {' and '.join(missing)}")
        if self.kind is ThinkKind.uniform and self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


class CacheCounts(BaseModel):
    """One engine's prefix cache (or all together) over the run."""

    prompt_tokens: int = Field(description="Prompt tokens of the requests admitted.")
    prefilled_tokens: int = Field(description="Of which computed (the rest came from the cache).")
    hit_rate_tokens: float = Field(description="Prompt tokens served from the cache over prompt tokens.")
    lookup_blocks: int = Field(description="Full prompt blocks looked up.")
    hit_blocks: int
    hit_rate_blocks: float
    host_hit_blocks: int = Field(description="Hits brought back from the host tier.")
    evictions: int = Field(description="Blocks evicted from device memory (to the host tier when there is one).")
    host_transfer_s: float = Field(description="Seconds spent bringing blocks back over the host link.")


class PrefixCacheRead(BaseModel):
    total: CacheCounts
    engines: list[CacheCounts] = Field(description="Per engine that got requests (prefill workers if disaggregated).")
    block_tokens: int = Field(description="Tokens per hashed block of the load.")
