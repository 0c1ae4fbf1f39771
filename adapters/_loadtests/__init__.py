"""Load-test result files read into one shape (`Measured`), one module per tool; checked for figures that contradict
each other; and the load they describe, as a serving request's `load` (docs/serving-benchmarks.md)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from typing import Any

from adapters._errors import InvalidField
from adapters._loadtests import aiperf, guidellm, inference_perf, sglang, trtllm, vllm
from adapters._loadtests._common import ROOT, Figures, Measured
from adapters._loadtests.calibrate import ServingCorrection, calibrate_serving, correction_of, fit_serving, held_out

__all__ = [
    "FORMATS",
    "Figures",
    "Measured",
    "ServingCorrection",
    "calibrate_serving",
    "check_measured",
    "correction_of",
    "fit_serving",
    "held_out",
    "load_of",
    "load_test_errors",
    "measured_doc",
    "read_load_test",
]  # fmt: skip

READERS: dict[str, Callable[[Any], Measured]] = {
    aiperf.NAME: aiperf.read,
    guidellm.NAME: guidellm.read,
    vllm.NAME: vllm.read,
    sglang.NAME: sglang.read,
    inference_perf.NAME: inference_perf.read,
    trtllm.NAME: trtllm.read,
}
FORMATS = tuple(READERS)
# Rounding the tools apply before they write (aiperf and vLLM write full floats; a throughput over a duration both
# rounded to the millisecond stays well inside 1 %).
TOLERANCE = 0.01


def read_load_test(fmt: str, result: Any, entry: int | None = None) -> Measured:
    """The measured figures of one load test from its tool's file (`result`: the parsed JSON, or the file's text).
    `entry`: which run of a file that holds several (GuideLLM's benchmarks, SGLang's lines; default the last)."""
    if fmt not in READERS:
        raise InvalidField("body.format", f"unknown format {fmt!r}; accepted: {', '.join(FORMATS)}")
    if isinstance(result, str) and fmt != sglang.NAME:
        try:
            result = json.loads(result)
        except json.JSONDecodeError as err:
            raise InvalidField(ROOT, f"not JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    if fmt == guidellm.NAME:
        measured = guidellm.read(result, entry)
    elif fmt == sglang.NAME:
        measured = sglang.read(sglang.select(result, entry))
    else:
        if entry not in (None, 0, -1):
            raise InvalidField("body.entry", f"a {fmt} file holds one run")
        measured = READERS[fmt](result)
    check_measured(measured)
    return measured


def _field(m: Measured, figure: str, stat: int) -> str:
    return m.where.get(figure, ROOT).replace("{p}", m.stats[stat])


def check_measured(m: Measured) -> None:
    """`InvalidField` for figures that contradict each other: percentiles out of order, a time to first token above
    the whole request, a throughput above what the request count (or the tokens) over the duration allow."""
    for figure in ("ttft_s", "tpot_s", "e2e_s"):
        fig: Figures | None = getattr(m, figure)
        if fig is None:
            continue
        ordered = [(i, v) for i, v in ((1, fig.p50), (2, fig.p90), (3, fig.p99)) if v is not None]
        for (i, low), (j, high) in itertools.pairwise(ordered):
            if low > high * (1 + 1e-9):
                raise InvalidField(
                    _field(m, figure, i),
                    f"{m.stats[i]} ({low:.6g} s) is above {m.stats[j]} ({high:.6g} s): percentiles rise with p",
                )
    if m.ttft_s is not None and m.ttft_s.mean > m.e2e_s.mean * (1 + TOLERANCE):
        raise InvalidField(
            _field(m, "ttft_s", 0),
            f"the mean time to first token ({m.ttft_s.mean:.6g} s) exceeds the mean end-to-end latency "
            f"({m.e2e_s.mean:.6g} s)",
        )
    most = m.requests / m.duration_s
    if m.requests_per_s > most * (1 + TOLERANCE):
        raise InvalidField(
            m.where.get("requests_per_s", ROOT),
            f"{m.requests_per_s:.6g} requests/s is more than the {m.requests} requests over {m.duration_s:.6g} s "
            f"allow ({most:.6g}/s)",
        )
    if m.mean_output_tokens is not None:
        tokens = m.requests * m.mean_output_tokens / m.duration_s
        if m.output_tokens_per_s > tokens * (1 + TOLERANCE):
            raise InvalidField(
                m.where.get("output_tokens_per_s", ROOT),
                f"{m.output_tokens_per_s:.6g} output tokens/s is more than {m.requests} requests of "
                f"{m.mean_output_tokens:.6g} tokens over {m.duration_s:.6g} s allow ({tokens:.6g}/s)",
            )


def load_of(m: Measured, requests: int | None = None) -> dict[str, Any]:
    """The serving request's `load` a file describes: its concurrency (a closed loop) or rate (an open loop), its
    mean lengths as fixed lengths, and its request count. `InvalidField` at `body.load` when the file does not say."""
    missing = []
    if m.concurrency is None and m.rate_per_s is None:
        missing.append("concurrency or rate_per_s")
    if m.mean_prompt_tokens is None or not m.mean_prompt_tokens >= 1:
        missing.append("prompt_tokens")
    if m.mean_output_tokens is None or not m.mean_output_tokens >= 1:
        missing.append("output_tokens")
    if missing:
        raise InvalidField("body.load", f"the {m.tool} file does not say its {', '.join(missing)}: give them in `load`")
    assert m.mean_prompt_tokens is not None and m.mean_output_tokens is not None
    count = requests or m.requests
    load: dict[str, Any] = {
        "requests": count,
        "prompt_tokens": {"kind": "fixed", "value": max(1, round(m.mean_prompt_tokens))},
        "output_tokens": {"kind": "fixed", "value": max(1, round(m.mean_output_tokens))},
    }
    if m.concurrency is not None:
        load["concurrency"] = min(m.concurrency, count)
    else:
        load["rate_per_s"] = m.rate_per_s
    return load


def measured_doc(m: Measured) -> dict[str, Any]:
    """The measured figures as stored and shown (`ServingMeasured`)."""

    def fig(f: Figures | None) -> dict[str, float | None] | None:
        return None if f is None else {"mean": f.mean, "p50": f.p50, "p90": f.p90, "p99": f.p99}

    return {
        "tool": m.tool,
        "tool_version": m.tool_version,
        "requests": m.requests,
        "duration_s": m.duration_s,
        "requests_per_s": m.requests_per_s,
        "output_tokens_per_s": m.output_tokens_per_s,
        "ttft_s": fig(m.ttft_s),
        "tpot_s": fig(m.tpot_s),
        "itl_s": fig(m.itl_s),
        "e2e_s": fig(m.e2e_s),
        "mean_prompt_tokens": m.mean_prompt_tokens,
        "mean_output_tokens": m.mean_output_tokens,
        "concurrency": m.concurrency,
        "rate_per_s": m.rate_per_s,
    }


COMPARED = ("ttft_s", "tpot_s", "e2e_s", "requests_per_s", "output_tokens_per_s")


def _mean(value: Any) -> float | None:
    if isinstance(value, dict):
        value = value.get("mean")
    return float(value) if isinstance(value, float | int) and math.isfinite(value) else None


def load_test_errors(measured: dict[str, Any], predicted: dict[str, Any]) -> dict[str, float | None]:
    """predicted / measured − 1 for the means of the latencies and the throughputs (+: predicted too slow for a
    latency, too fast for a throughput); None where the tool did not measure it."""
    out: dict[str, float | None] = {}
    for name in COMPARED:
        m, p = _mean(measured.get(name)), _mean(predicted.get(name))
        out[name] = p / m - 1 if m is not None and p is not None and m > 0 else None
    return out
