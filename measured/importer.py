"""`ridgeline benchmarks import`: measured tables in standard formats, posted to a Ridgeline server.

The import goes over HTTP (`POST /v1/benchmarks`, httpx) rather than into the database: it takes the same path as a
worker's upload — authentication, validation, idempotency, predictions and calibrated predictions — needs no
database credentials, and works against a remote server. Batches of at most 10 000 results carry an
Idempotency-Key derived from the file's content, so importing the same file twice stores it once.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from measured import datasets
from schemas.benchmarks import MAX_RESULTS, CollectiveKind, TimingScope

FORMATS = (
    "nccl-tests", "aiconfigurator-gemm", "aiconfigurator-attention", "aiconfigurator-nccl", "vidur", "vidur-network",
    "llmcompass", "llmcompass-allreduce",
)  # fmt: skip
# What each source's numbers cover (validation/README.md).
SCOPES = {
    "nccl-tests": TimingScope.kernel,  # CUDA events around the collective's iterations, averaged
    "aiconfigurator-gemm": TimingScope.graph_replay,
    "aiconfigurator-attention": TimingScope.graph_replay,
    "aiconfigurator-nccl": TimingScope.kernel,  # the whole collective, as nccl-tests reports it
    "vidur": TimingScope.kernel,  # torch-profiler sums of kernel time
    "vidur-network": TimingScope.kernel,
    "llmcompass": TimingScope.wall_clock,  # host time around op(); synchronize()
    "llmcompass-allreduce": TimingScope.kernel,
}
NCCL_DTYPES = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "int8": "int8", "double": "fp64", "fp8": "fp8"}
DTYPE_NAMES = {**NCCL_DTYPES, "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "fp32": "fp32"}
ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
NCCL_NAMES = {
    "all_reduce": CollectiveKind.all_reduce, "all_gather": CollectiveKind.all_gather,
    "reduce_scatter": CollectiveKind.reduce_scatter, "alltoall": CollectiveKind.all_to_all,
    "all_to_all": CollectiveKind.all_to_all, "broadcast": CollectiveKind.broadcast, "reduce": CollectiveKind.reduce,
    "sendrecv": CollectiveKind.send_recv, "send_recv": CollectiveKind.send_recv,
}  # fmt: skip


class FormatError(ValueError):
    """The file is not in the format named; the message says where."""


@dataclass
class Parsed:
    timing_scope: TimingScope
    results: list[dict[str, Any]]
    device: str | None = None  # what the file says it ran on (nccl-tests prints it)
    skipped: dict[str, int] = field(default_factory=dict)  # rows not imported: why → how many


def _kernel_rows(
    path: Path, kernel_source: str | None, kind: Callable[[dict[str, str]], str | None]
) -> tuple[list[dict[str, str]], dict[str, int]]:
    """An aiconfigurator table's importable rows (`kind` gives None for those, else why a row is not imported), of
    one kernel (`kernel_source`; any, when the importable rows come from one), and the other rows counted by reason.
    Importable rows of several kernels and no choice are an error: one run holds one kernel's timings, or
    calibration would learn an average of kernels that no deployment runs."""
    reasons = [(row, kind(row)) for row in datasets.dict_rows(path)]
    skipped = Counter(why for _, why in reasons if why is not None)
    usable = [row for row, why in reasons if why is None]
    sources = Counter(r.get("kernel_source", "") for r in usable)
    if kernel_source is None:
        if len(sources) > 1:
            raise FormatError(f"{path.name} holds the timings of several kernels ({_listed(sources)}): import one "
                              "at a time with --kernel-source NAME")  # fmt: skip
        return usable, dict(sorted(skipped.items()))
    if kernel_source not in sources:
        raise FormatError(f"{path.name} has no importable rows of kernel_source {kernel_source!r}; it has "
                          f"{_listed(sources) or 'none'}")  # fmt: skip
    skipped.update({f"kernel_source {name}": n for name, n in sources.items() if name != kernel_source})
    return [r for r in usable if r.get("kernel_source", "") == kernel_source], dict(sorted(skipped.items()))


def _gemm_kind(row: dict[str, str]) -> str | None:
    # Quantised rows are not imported: what their op is (fp8 per tensor or per block, weight-only, SmoothQuant)
    # depends on the library that ran them, which a `gemm_dtype` alone does not say.
    return None if row["gemm_dtype"] == "bfloat16" else f"gemm_dtype {row['gemm_dtype']}"


def _attention_kind(row: dict[str, str]) -> str | None:
    pair = (row["attn_dtype"], row["kv_cache_dtype"])
    return None if pair == ("bfloat16", "bfloat16") else f"attn_dtype {pair[0]}, kv_cache_dtype {pair[1]}"


def _listed(counts: Counter[str]) -> str:
    return ", ".join(f"{name or '(empty)'}: {n} rows" for name, n in sorted(counts.items()))


def _results_of(groups: list[datasets.Group]) -> list[dict[str, Any]]:
    """One result per measured row: the group's op with that row's sizes.

    A row that the validation models as several kernels (TensorRT-LLM's attention call: pre-processing, then
    attention) is stored as its main op; the measured time still covers the whole call, and calibration learns the
    difference."""
    out: list[dict[str, Any]] = []
    for group in groups:
        part = group.parts[0]
        template = part.op.model_dump(mode="json", exclude_none=True)
        columns = {
            name: np.broadcast_to(np.asarray(values, dtype=np.float64), group.measured_s.shape)
            for name, values in part.overrides.items()
        }
        for i, measured in enumerate(group.measured_s.tolist()):
            op = dict(template)
            for name, values in columns.items():
                value = float(values[i])
                op[name] = round(value) if abs(value - round(value)) < 1e-6 else value
            out.append({"op": op, "median_s": measured})
    return out


def _phase(path: Path, rows: list[dict[str, str]]) -> str:
    name = path.name.lower()
    if "generation" in name:
        return "generation"
    if "context" in name:
        return "context"
    return "generation" if rows and all(float(r.get("step") or 0) > 0 for r in rows[:50]) else "context"


def parse_nccl_tests(text: str, collective: str | None, path: Path) -> Parsed:
    """nccl-tests' stdout (e.g. `all_reduce_perf -b 8 -e 1G -f 2 -g 8 > out.txt`): one result per size line, out-of-
    place time; devices from the `#  Rank` lines; the collective from `collective` or the file name."""
    name = collective or next((key for key in NCCL_NAMES if key in path.name.lower()), None)
    if name is None or name not in NCCL_NAMES:
        raise FormatError(
            f"{path.name}: say which collective it timed with --collective ({', '.join(sorted(NCCL_NAMES))})"
        )
    kind = NCCL_NAMES[name]
    ranks = re.findall(r"^#\s+Rank\s+\d+\s.*?device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$", text, re.MULTILINE)
    devices = len(ranks)
    if devices < 2:
        match = re.search(r"nThread\s+(\d+)\s+nGpus\s+(\d+)", text)
        devices = int(match.group(1)) * int(match.group(2)) if match else 0
    if devices < 2:
        raise FormatError(f"{path.name}: no '#  Rank' lines or nGpus header: cannot tell how many devices took part")
    results = []
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or not tokens[0].isdigit():
            continue
        # size count type redop root time algbw busbw #wrong time algbw busbw #wrong (root absent in old versions)
        time_index = 5 if len(tokens) >= 13 else 4
        dtype = NCCL_DTYPES.get(tokens[2])
        if dtype is None:
            raise FormatError(f"{path.name}:{number}: data type {tokens[2]!r} is not one of {', '.join(NCCL_DTYPES)}")
        try:
            size, time_us = int(tokens[0]), float(tokens[time_index])
        except (ValueError, IndexError):
            raise FormatError(f"{path.name}:{number}: not a nccl-tests result line: {line.strip()!r}") from None
        if size == 0:
            continue
        op = {"kind": "collective", "collective": str(kind), "bytes": size, "devices": devices, "dtype": dtype}
        results.append({"op": op, "median_s": time_us * 1e-6})
    if not results:
        raise FormatError(f"{path.name}: no result lines found (is this nccl-tests output?)")
    return Parsed(SCOPES["nccl-tests"], results, ranks[0] if ranks else None)


def _collective(kind: str, nbytes: float, devices: int, dtype: str, median_s: float) -> dict[str, Any]:
    op = {"kind": "collective", "collective": str(NCCL_NAMES[kind]), "bytes": round(nbytes), "devices": devices}
    return {"op": op | {"dtype": dtype}, "median_s": median_s}


def parse_aiconfigurator_nccl(path: Path) -> Parsed:
    """`nccl_perf.csv` or `custom_allreduce_perf.csv`: message_size counts elements (README), latency in ms."""
    results = []
    for row in datasets.dict_rows(path):
        dtype = DTYPE_NAMES[(row.get("nccl_dtype") or row["allreduce_dtype"]).strip()]
        nbytes = float(row["message_size"]) * ELEMENT_BYTES[dtype]
        results.append(_collective(row["op_name"], nbytes, int(row["num_gpus"]), dtype, float(row["latency"]) * 1e-3))
    return Parsed(SCOPES["aiconfigurator-nccl"], results)


def parse_vidur_network(path: Path) -> Parsed:
    """vidur's `network/<system>/{all_reduce,send_recv}.csv`: size in bytes (fp16), median in ms; rank 0's rows
    (every rank times the same call), and only those within one node: a row with more workers than
    `devices_per_node` spans nodes, which a collective op (devices on one profile's fabric) cannot describe."""
    results = []
    for row in datasets.dict_rows(path):
        if int(float(row.get("rank") or 0)) != 0:
            continue
        if int(float(row["num_workers"])) > int(float(row.get("devices_per_node") or row["num_workers"])):
            continue
        kind = row["collective"].strip()
        median = float(row[f"time_stats.{kind}.median"]) * 1e-3
        results.append(_collective(kind, float(row["size"]), int(float(row["num_workers"])), "fp16", median))
    return Parsed(SCOPES["vidur-network"], results)


def parse_llmcompass_allreduce(path: Path, devices: int = 4) -> Parsed:
    """`allreduce_A100x4_nvlink_transcribed.csv`: size_bytes, latency_us, 4 A100s over NVLink, fp16."""
    results = [
        _collective("all_reduce", float(row["size_bytes"]), devices, "fp16", float(row["latency_us"]) * 1e-6)
        for row in datasets.dict_rows(path)
    ]
    return Parsed(SCOPES["llmcompass-allreduce"], results)


def parse(fmt: str, path: Path, collective: str | None = None, kernel_source: str | None = None) -> Parsed:
    """The results in a file of one of `FORMATS`; for aiconfigurator's GEMM and attention tables, those of one
    `kernel_source` (needed where the file holds several), with the rows not imported counted by reason."""
    try:
        datasets.resolve(path)  # the file itself or its `.gz` copy: the parsers open either
    except datasets.MissingData:
        raise FormatError(f"no such file: {path}") from None
    try:
        if fmt == "nccl-tests":
            with datasets.open_text(path, errors="replace") as f:
                return parse_nccl_tests(f.read(), collective, path)
        if fmt == "aiconfigurator-nccl":
            return parse_aiconfigurator_nccl(path)
        if fmt == "vidur-network":
            return parse_vidur_network(path)
        if fmt == "llmcompass-allreduce":
            return parse_llmcompass_allreduce(path)
        skipped: dict[str, int] = {}
        if fmt == "aiconfigurator-gemm":
            rows, skipped = _kernel_rows(path, kernel_source, _gemm_kind)
            groups = datasets.aiconfigurator_gemm(path, rows)
        elif fmt == "aiconfigurator-attention":
            rows, skipped = _kernel_rows(path, kernel_source, _attention_kind)
            groups = datasets.aiconfigurator_attention(path, _phase(path, rows), rows=rows)
        elif fmt == "vidur":
            groups = datasets.vidur_table(path)
        elif fmt == "llmcompass":
            groups = datasets.llmcompass_table(path)
        else:
            raise FormatError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    except (KeyError, IndexError, ValueError) as err:
        if isinstance(err, FormatError):
            raise
        raise FormatError(f"{path.name} is not a {fmt} table: {type(err).__name__}: {err}") from None
    return Parsed(SCOPES[fmt], _results_of(groups), skipped=skipped)


def batches(results: list[dict[str, Any]], size: int = MAX_RESULTS) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(results), size):
        yield results[start : start + size]


def post(
    parsed: Parsed,
    *,
    server: str,
    token: str,
    hardware: str,
    host: str,
    file_digest: str,
    software: dict[str, str] | None = None,
    batch_size: int = MAX_RESULTS,
    transport: httpx.BaseTransport | None = None,
) -> Iterator[tuple[int, dict[str, Any], bool]]:
    """Post the results in batches; yields (batch index, response body, replayed) per batch. Raises
    `httpx.HTTPStatusError` on a refused batch (its body is the service's error envelope)."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server, timeout=300, transport=transport) as client:
        for index, chunk in enumerate(batches(parsed.results, batch_size)):
            key = f"import-{file_digest[:32]}-{hardware}-{batch_size}-{index}"
            body = {
                "hardware": hardware,
                "host": host,
                "software": software or {},
                "timing_scope": str(parsed.timing_scope),
                "results": chunk,
            }
            response = client.post("/v1/benchmarks", json=body, headers=headers | {"Idempotency-Key": key})
            response.raise_for_status()
            yield index, response.json(), response.headers.get("Idempotent-Replayed") == "true"


def digest(path: Path, fmt: str) -> str:
    return hashlib.sha256(fmt.encode() + b"\0" + datasets.resolve(path).read_bytes()).hexdigest()
