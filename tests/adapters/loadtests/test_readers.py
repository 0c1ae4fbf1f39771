"""The result-file readers: each tool's fields read into seconds and per second, the load the file describes, and
the figures that contradict each other refused, naming the field of the file."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import adapters
from adapters import InvalidField
from tests.adapters.loadtests import files
from tests.adapters.loadtests.files import E2E, TPOT, TTFT

CASES = [("vllm", files.vllm), ("sglang", files.sglang), ("inference_perf", files.inference_perf),
         ("trtllm_bench", files.trtllm_bench)]  # fmt: skip


@pytest.mark.parametrize(("fmt", "make"), CASES)
def test_each_format_reads_the_same_load_test(fmt: str, make: Any) -> None:
    m = adapters.read_load_test(fmt, make())
    # Every file says: 100 requests over 20 s, 5 requests/s, 640 output tokens/s, and the figures of files.py.
    assert (m.requests, m.duration_s, m.requests_per_s, m.output_tokens_per_s) == (100, 20.0, 5.0, 640.0)
    assert m.ttft_s is not None and m.tpot_s is not None
    for got, want in ((m.ttft_s, TTFT), (m.tpot_s, TPOT), (m.e2e_s, E2E)):
        assert (got.mean, got.p50, got.p90, got.p99) == pytest.approx(want, rel=1e-9)
    # 51 200 prompt and 12 800 output tokens over 100 requests: 512 and 128 each; concurrency 8 (vLLM, SGLang:
    # request_rate "inf" with max_concurrency 8; inference-perf and trtllm-bench: their concurrency).
    assert (m.mean_prompt_tokens, m.mean_output_tokens, m.concurrency) == (512.0, 128.0, 8)
    load = adapters.load_of(m)
    assert load == {"requests": 100, "concurrency": 8, "prompt_tokens": {"kind": "fixed", "value": 512},
                    "output_tokens": {"kind": "fixed", "value": 128}}  # fmt: skip


def test_sglang_reads_the_line_asked_for() -> None:
    # The first line is the run at concurrency 4: 20 s / 0.5 = 40 s, 2.5 requests/s.
    m = adapters.read_load_test("sglang", files.sglang(), entry=0)
    assert (m.concurrency, m.duration_s, m.requests_per_s) == (4, 40.0, 2.5)
    with pytest.raises(InvalidField) as err:
        adapters.read_load_test("sglang", files.sglang(), entry=2)
    assert err.value.field == "body.entry"


def test_an_open_loop_is_read_as_its_rate() -> None:
    doc = files.vllm() | {"request_rate": 4.0, "max_concurrency": None}
    m = adapters.read_load_test("vllm", doc)
    assert (m.concurrency, m.rate_per_s) == (None, 4.0)
    assert adapters.load_of(m)["rate_per_s"] == 4.0


def test_unknown_format_names_the_accepted_ones() -> None:
    with pytest.raises(InvalidField) as err:
        adapters.read_load_test("locust", {})
    assert err.value.field == "body.format"
    for name in ("aiperf", "guidellm", "vllm", "sglang", "inference_perf", "trtllm_bench"):
        assert name in err.value.message


@pytest.mark.parametrize(
    ("fmt", "make", "edit", "field"),
    [
        # p50 above p99 (vLLM names the median median_X_ms)
        ("vllm", files.vllm, lambda d: d.update(median_ttft_ms=95.0), "body.result.median_ttft_ms"),
        # 6 requests/s from 100 requests in 20 s (at most 5/s)
        ("vllm", files.vllm, lambda d: d.update(request_throughput=6.0), "body.result.request_throughput"),
        # 700 output tokens/s from 12 800 tokens in 20 s (at most 640/s)
        ("vllm", files.vllm, lambda d: d.update(output_throughput=700.0), "body.result.output_throughput"),
        # a TTFT above the whole request
        ("inference_perf", files.inference_perf,
         lambda d: d["successes"]["latency"]["time_to_first_token"].update(mean=2.0, median=2.0, p90=2.0, p99=2.0),
         "body.result.successes.latency.time_to_first_token.mean"),
        ("trtllm_bench", files.trtllm_bench,
         lambda d: d["streaming_metrics"]["tpot_percentiles_ms"].update(p90=20.0),
         "body.result.streaming_metrics.tpot_percentiles_ms.p90"),
        # a field the tool always writes, missing
        ("trtllm_bench", files.trtllm_bench, lambda d: d["performance"].pop("total_latency_ms"),
         "body.result.performance.total_latency_ms"),
        ("vllm", files.vllm, lambda d: d.update(duration="20"), "body.result.duration"),
    ],
)  # fmt: skip
def test_figures_that_contradict_each_other_name_their_field(fmt: str, make: Any, edit: Any, field: str) -> None:
    doc = copy.deepcopy(make())
    edit(doc)
    with pytest.raises(InvalidField) as err:
        adapters.read_load_test(fmt, doc)
    assert err.value.field == field


def test_a_file_without_its_load_asks_for_it() -> None:
    doc = files.inference_perf()
    doc["load_summary"] = {"count": 100}
    m = adapters.read_load_test("inference_perf", doc)
    with pytest.raises(InvalidField) as err:
        adapters.load_of(m)
    assert err.value.field == "body.load"
    assert "concurrency or rate_per_s" in err.value.message


def test_errors_are_predicted_over_measured() -> None:
    # 0.05 s predicted over 0.04 s measured: +25 %; 800 tokens/s over 640: +25 %; TPOT not predicted: None.
    errors = adapters.load_test_errors(
        {"ttft_s": {"mean": 0.04}, "output_tokens_per_s": 640.0, "tpot_s": None},
        {"ttft_s": {"mean": 0.05}, "output_tokens_per_s": 800.0, "tpot_s": {"mean": 0.01}},
    )
    assert errors["ttft_s"] == pytest.approx(0.25)
    assert errors["output_tokens_per_s"] == pytest.approx(0.25)
    assert errors["tpot_s"] is None


DATA = Path(__file__).with_name("data")


@pytest.mark.parametrize(("fmt", "name"), [("aiperf", "aiperf-0.13.0.json.gz"), ("guidellm", "guidellm-0.8.1.json.gz")])
def test_files_the_tools_wrote_read_as_the_load_they_were_given(fmt: str, name: str) -> None:
    # data/README.md: 40 requests at concurrency 4, 256 prompt and 64 output tokens
    doc = json.loads(gzip.decompress((DATA / name).read_bytes()))
    m = adapters.read_load_test(fmt, doc)
    assert (m.requests, m.concurrency, m.mean_prompt_tokens, m.mean_output_tokens) == (40, 4, 256.0, 64.0)
    assert m.tool_version == name.split("-")[1].removesuffix(".json.gz")
    # Units: aiperf writes milliseconds ("unit": "ms"), GuideLLM's *_ms metrics too; both read as seconds.
    if fmt == "aiperf":
        assert m.ttft_s is not None and m.ttft_s.mean == doc["time_to_first_token"]["avg"] / 1e3
        assert doc["time_to_first_token"]["unit"] == "ms"
    else:
        ttft = doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"]
        assert m.ttft_s is not None and m.ttft_s.mean == ttft / 1e3


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [at] + [p for k, v in node.items() for p in _paths(v, (*at, k))]
    if isinstance(node, list) and node and len(node) < 5:
        return [at] + [p for i, v in enumerate(node) for p in _paths(v, (*at, i))]
    return [at]


def _replaced(doc: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    out = copy.copy(doc)
    out[at[0]] = _replaced(doc[at[0]], at[1:], value)
    return out


@pytest.mark.parametrize(("fmt", "make"), [*CASES[:1], CASES[2], CASES[3]])
def test_any_field_of_any_type_is_read_or_refused_naming_a_field(fmt: str, make: Any) -> None:
    # Every field of the file, replaced by a value of each other JSON type: the reader answers or raises
    # InvalidField (a 422 naming the field), never anything else (a 500).
    doc = make()
    for at in _paths(doc):
        for value in ("x", ["x"], {"x": 1}, None, True, -1, 1e308):
            try:
                m = adapters.read_load_test(fmt, _replaced(doc, at, value))
                adapters.measured_doc(m)
            except InvalidField as err:
                assert err.field.startswith("body.")


@pytest.mark.parametrize(("fmt", "name"), [("aiperf", "aiperf-0.13.0.json.gz"), ("guidellm", "guidellm-0.8.1.json.gz")])
def test_any_field_the_tools_wrote_of_any_type_is_read_or_refused(fmt: str, name: str) -> None:
    doc = json.loads(gzip.decompress((DATA / name).read_bytes()))
    if fmt == "guidellm":  # the fields the reader looks at: the metrics and the config of the one benchmark
        bench = doc["benchmarks"][0]
        doc = {"benchmarks": [{"duration": bench["duration"], "config": bench["config"],
                               "metrics": bench["metrics"]}]}  # fmt: skip
    for at in _paths(doc):
        if len(at) > 6:
            continue
        for value in ("x", ["x"], None, -1):
            try:
                adapters.measured_doc(adapters.read_load_test(fmt, _replaced(doc, at, value)))
            except InvalidField as err:
                assert err.field.startswith("body.")
