"""What a load-testing tool's result file says, read the same way for every tool: the measured figures in seconds
and per second, and what the file says of its load (a closed loop's concurrency, an open loop's rate, the mean
lengths). Every reader takes the file as parsed JSON and raises `InvalidField` naming the field of the file
(`body.result.…`) that is missing or wrong."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from adapters._errors import InvalidField

ROOT = "body.result"


@dataclass(frozen=True)
class Figures:
    """One latency's mean and percentiles, seconds (None where the tool did not report it)."""

    mean: float
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


@dataclass(frozen=True)
class Measured:
    """One load test as measured. `where` maps each figure to the field of the file it was read from, so that a
    later check (`check_measured`) names the field the user sent."""

    tool: str
    requests: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: Figures | None
    tpot_s: Figures | None
    itl_s: Figures | None
    e2e_s: Figures
    mean_prompt_tokens: float | None = None
    mean_output_tokens: float | None = None
    concurrency: int | None = None
    rate_per_s: float | None = None
    tool_version: str | None = None
    # How the tool names a latency's mean, p50, p90 and p99, and where each figure is in the file (a latency's
    # template takes its statistic's name as `{p}`).
    stats: tuple[str, str, str, str] = ("mean", "p50", "p90", "p99")
    where: dict[str, str] = field(default_factory=dict)


def path(*parts: str | int) -> str:
    return ".".join([ROOT, *(str(p) for p in parts)])


def need(doc: Any, *keys: str | int) -> Any:
    """`doc[k0][k1]…`, or `InvalidField` naming the first missing key."""
    node = doc
    for i, key in enumerate(keys):
        if isinstance(key, int):
            ok = isinstance(node, list) and -len(node) <= key < len(node)
        else:
            ok = isinstance(node, dict) and key in node and node[key] is not None
        if not ok:
            raise InvalidField(path(*keys[: i + 1]), "missing: the tool writes this field; is this its result file?")
        node = node[key]
    return node


def opt(doc: Any, *keys: str | int) -> Any:
    node = doc
    for key in keys:
        if isinstance(key, int):
            if not (isinstance(node, list) and -len(node) <= key < len(node)):
                return None
        elif not (isinstance(node, dict) and node.get(key) is not None):
            return None
        node = node[key]
    return node


def number(value: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidField(where, f"expected a number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out) or out < 0 or (positive and out == 0):
        raise InvalidField(where, f"expected a {'positive' if positive else 'non-negative'} finite number, got {value}")
    return out


def num(doc: Any, *keys: str | int, positive: bool = False) -> float:
    return number(need(doc, *keys), path(*keys), positive=positive)


def opt_num(doc: Any, *keys: str | int) -> float | None:
    value = opt(doc, *keys)
    return None if value is None else number(value, path(*keys))


def count(doc: Any, *keys: str | int) -> int:
    value = num(doc, *keys, positive=True)
    if value != int(value):
        raise InvalidField(path(*keys), f"expected a whole number of requests, got {value}")
    return int(value)


UNIT_SECONDS = {"s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def rate_or_concurrency(value: Any, where: str) -> float | None:
    """A request rate as the tools write it: a number, or "inf" (vLLM, SGLang: every request sent at once)."""
    if value is None or value == "inf" or value == "trace":
        return None
    rate = number(value, where)
    return rate if math.isfinite(rate) and rate > 0 else None


def whole(value: Any) -> int | None:
    """A positive whole number the file gives (a concurrency), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if value >= 1 and value == int(value) else None


def text(value: Any) -> str | None:
    return value[:64] if isinstance(value, str) else None


def rate(value: Any) -> float | None:
    """A positive request rate the file gives (requests per second), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)
