"""Request traces as the serving simulator replays them: parsed from the files traces are published in, checked,
summarised, and encoded for storage. A trace is its arrivals (seconds from its first request) and its prompt and
output lengths; its id is the digest of those three columns, so the same requests are one trace whatever the file
or name they came with.

File formats (the columns are matched by name, case and surrounding spaces ignored; other columns are ignored):
- CSV or JSON Lines with Ridgeline's own columns `arrival_s`, `prompt_tokens`, `output_tokens`;
- the Azure LLM inference traces (Azure/AzurePublicDataset, `AzureLLMInferenceDataset2023.md` and 2024): CSV,
  `TIMESTAMP` (a date and time), `ContextTokens`, `GeneratedTokens`;
- BurstGPT (HPMLL/BurstGPT, `BurstGPT_*.csv`): CSV, `Timestamp` (seconds), `Request tokens`, `Response tokens`;
- the Mooncake traces (kvcache-ai/Mooncake, `FAST25-release/traces`): JSON Lines, `timestamp` (milliseconds),
  `input_length`, `output_length`, and `hash_ids`, the prompt's blocks of 512 tokens, kept.

Sharing (issue 41), optional: Ridgeline's JSON and JSON Lines take `prefix_hashes` (the prompt's blocks of
`hash_block_tokens`, 512 unless a JSON document says otherwise: equal hashes at a position are the same tokens),
`session` and `turn` (a session's turns are sent in turn order, each no earlier than the turn before it ends); its
CSV takes `session` and `turn` columns. They are stored with the columns (`TraceSharing`) and enter the digest only
when present, so a trace without them keeps its id.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from adapters._errors import InvalidField
from adapters._json import check_json, depth_error
from adapters._trace_sharing import ADAPTER_MAGIC, SHARING_MAGIC, SharedColumns, TraceSharing
from schemas import limits
from schemas.traces import TraceFormat

CSV_TYPES = ("text/csv",)
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines")
TRACE_FILE_TYPES = CSV_TYPES + JSONL_TYPES

# Column sets by format: (arrival, prompt, output) names as they are written, and the arrival's unit in seconds
# (None: a date and time).
_CSV_COLUMNS: dict[TraceFormat, tuple[tuple[str, str, str], float | None]] = {
    TraceFormat.csv: (("arrival_s", "prompt_tokens", "output_tokens"), 1.0),
    TraceFormat.azure: (("TIMESTAMP", "ContextTokens", "GeneratedTokens"), None),
    TraceFormat.burstgpt: (("Timestamp", "Request tokens", "Response tokens"), 1.0),
}
_JSONL_COLUMNS: dict[TraceFormat, tuple[tuple[str, str, str], float | None]] = {
    TraceFormat.jsonl: (("arrival_s", "prompt_tokens", "output_tokens"), 1.0),
    TraceFormat.mooncake: (("timestamp", "input_length", "output_length"), 1e-3),
}
_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class Trace:
    """A checked trace: arrivals in seconds from the first (non-decreasing), lengths in tokens (1 … MAX_TOKENS);
    `sharing`: its prefix hashes and sessions (None: independent requests)."""

    name: str
    format: TraceFormat
    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    sharing: TraceSharing | None = None

    @property
    def id(self) -> str:
        """`tr_` and the first 24 hex digits of the SHA-256 of the three columns (little-endian float64, int64),
        and of the sharing columns when there are any."""
        digest = hashlib.sha256(self._raw() + (self.sharing.raw() if self.sharing else b"")).hexdigest()
        return f"tr_{digest[:24]}"

    def _raw(self) -> bytes:
        return b"".join(
            np.ascontiguousarray(a, dtype=dtype).tobytes()
            for a, dtype in ((self.arrival_s, "<f8"), (self.prompt_tokens, "<i8"), (self.output_tokens, "<i8"))
        )

    def encode(self) -> bytes:
        """The columns for storage: zlib-compressed, the row count first (8 bytes, little-endian), the sharing
        columns after the three when there are any."""
        extra = self.sharing.raw() if self.sharing else b""
        return zlib.compress(len(self.arrival_s).to_bytes(8, "little") + self._raw() + extra, 6)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0])

    def summary(self) -> dict[str, Any]:
        """What `TraceRead` reports besides identity: count, span, mean rate and the lengths' statistics."""
        n, span = len(self.arrival_s), self.duration_s
        return {
            "requests": n,
            "duration_s": span,
            "rate_per_s": (n - 1) / span if n > 1 and span > 0 else None,  # n arrivals: n − 1 gaps over the span
            "prompt_tokens": _stats(self.prompt_tokens),
            "output_tokens": _stats(self.output_tokens),
        }


def _stats(tokens: NDArray[np.int64]) -> dict[str, Any]:
    """`TokenStats`' fields."""
    p50, p90 = np.percentile(tokens, [50, 90])
    return {"mean": float(tokens.mean()), "p50": float(p50), "p90": float(p90), "max": int(tokens.max())}


def decode_trace(name: str, fmt: str, data: bytes) -> Trace:
    """A stored trace (`Trace.encode`) back as columns."""
    raw = zlib.decompress(data)
    n = int.from_bytes(raw[:8], "little")
    arrival = np.frombuffer(raw, dtype="<f8", count=n, offset=8).astype(np.float64)
    prompt = np.frombuffer(raw, dtype="<i8", count=n, offset=8 + 8 * n).astype(np.int64)
    output = np.frombuffer(raw, dtype="<i8", count=n, offset=8 + 16 * n).astype(np.int64)
    rest = raw[8 + 24 * n :]
    sharing = TraceSharing.decode(rest, n) if rest.startswith((SHARING_MAGIC, ADAPTER_MAGIC)) else None
    return Trace(name, TraceFormat(fmt), arrival, prompt, output, sharing)


def trace_of(name: str, fmt: TraceFormat, arrivals: Sequence[float], prompts: Sequence[int], outputs: Sequence[int],
             lines: Sequence[int] | None = None, field: str = "body.requests",
             shared: SharedColumns | None = None) -> Trace:  # fmt: skip
    """A checked trace from its columns, arrivals made relative to the first. `lines`: each request's line in the
    file, for the error messages (None: a JSON document, whose requests are numbered); `field`: the requests' path
    in the request body (an uploaded trace's `body.requests`, a serving load's `body.load.trace`). The count is
    bounded before (a document's schema; a file's reader stops at `limits.MAX_SERVING_REQUESTS`)."""
    if not arrivals:
        raise InvalidField("body", "a trace needs at least one request")
    arrival = np.asarray(arrivals, dtype=np.float64)

    def where(i: int) -> str:
        return f"line {lines[i]}: " if lines is not None else ""

    for column, values in (("prompt_tokens", prompts), ("output_tokens", outputs)):
        bad = [i for i, v in enumerate(values) if not 1 <= v <= limits.MAX_TOKENS]
        if bad:
            i = bad[0]
            raise InvalidField(
                f"{field}.{i}.{column}",
                f"{where(i)}{values[i]} tokens: a length is a whole number of tokens, 1 … {limits.MAX_TOKENS:,}"
                + (" (BurstGPT writes 0 for a failed request: leave those rows out)" if values[i] == 0 else ""),
            )
    backwards = np.flatnonzero(np.diff(arrival) < 0)
    if backwards.size:
        i = int(backwards[0]) + 1
        raise InvalidField(
            f"{field}.{i}.arrival_s",
            f"{where(i)}arrivals must not go backwards: {arrival[i]:.9g} s after {arrival[i - 1]:.9g} s (sort the "
            "trace)",
        )
    relative = arrival - arrival[0]
    if relative[-1] > limits.MAX_SECONDS:
        raise InvalidField(
            f"{field}.{len(relative) - 1}.arrival_s",
            f"the trace spans {relative[-1]:.6g} s: at most {limits.MAX_SECONDS:.0f} s from its first request",
        )
    sharing = None if shared is None or shared.empty else shared.check(prompts, field, where)
    return Trace(name, fmt, relative, np.asarray(prompts, np.int64), np.asarray(outputs, np.int64), sharing)


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, without its parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_trace(body: bytes, content_type: str, name: str) -> Trace:
    """A trace file (CSV or JSON Lines, by `content_type`: `TRACE_FILE_TYPES`) as a checked trace."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidField("body", f"a trace file is UTF-8 text (byte {err.start} is not)") from None
    if "\x00" in text:  # as in any other input (adapters.check_json)
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise InvalidField("body", f"line {line}: a NUL character (U+0000), which no trace file holds", "nul_character")
    kind = media_type(content_type)
    if kind in CSV_TYPES:
        return _csv(text, name)
    if kind in JSONL_TYPES:
        return _jsonl(text, name)
    raise ValueError(f"not a trace file type: {kind}")  # the service answers 415 before calling


def _norm(name: str) -> str:
    return name.strip().lower()


def _match(keys: Iterable[str], table: dict[TraceFormat, tuple[tuple[str, str, str], float | None]]
           ) -> tuple[TraceFormat, tuple[str, str, str], float | None] | None:  # fmt: skip
    have = {_norm(k): k for k in keys}
    for fmt, (names, unit) in table.items():
        if all(_norm(n) in have for n in names):
            found = (have[_norm(names[0])], have[_norm(names[1])], have[_norm(names[2])])
            return fmt, found, unit
    return None


def _expected(table: dict[TraceFormat, tuple[tuple[str, str, str], float | None]]) -> str:
    return "; ".join(f"{fmt.value}: {', '.join(names)}" for fmt, (names, _) in table.items())


def _seconds(value: Any, unit: float | None) -> float:
    """An arrival in seconds: a number in `unit` seconds, or (unit None) an ISO date and time, naive read as UTC."""
    if unit is None:
        stamp = datetime.fromisoformat(str(value).strip())
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    if isinstance(value, bool):
        raise ValueError("not a number")
    seconds = float(value) * unit
    if not math.isfinite(seconds):
        raise ValueError("not a finite number")
    return seconds


def _tokens(value: Any) -> int:
    """A length: an integer, or a number with no fractional part (`1024.0`, as some exports write counts)."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    if isinstance(value, int):
        return value
    number = float(value)
    if not math.isfinite(number) or number != int(number):
        raise ValueError("not a whole number")
    return int(number)


class _Columns:
    """The three columns as they are read, with each request's line, converted one value at a time."""

    def __init__(self, unit: float | None, names: tuple[str, str, str]) -> None:
        self.unit, self.names = unit, names
        self.shared = SharedColumns()
        self.arrivals: list[float] = []
        self.prompts: list[int] = []
        self.outputs: list[int] = []
        self.lines: list[int] = []

    def add(self, line: int, values: tuple[Any, Any, Any]) -> None:
        i = len(self.arrivals)
        if i >= limits.MAX_SERVING_REQUESTS:
            raise InvalidField("body", f"a trace holds at most {limits.MAX_SERVING_REQUESTS:,} requests (cut the file)")
        at = 0
        try:
            arrival = _seconds(values[0], self.unit)
            at = 1
            prompt = _tokens(values[1])
            at = 2
            output = _tokens(values[2])
        except (TypeError, ValueError, OverflowError):
            what = "a date and time" if at == 0 and self.unit is None else "a number"
            raise InvalidField(
                f"body.requests.{i}.{_FIELDS[at]}", f"line {line}: {self.names[at]} {values[at]!r} is not {what}"
            ) from None
        self.arrivals.append(arrival)
        self.prompts.append(prompt)
        self.outputs.append(output)
        self.lines.append(line)

    def trace(self, name: str, fmt: TraceFormat) -> Trace:
        return trace_of(name, fmt, self.arrivals, self.prompts, self.outputs, self.lines, shared=self.shared)


def _csv(text: str, name: str) -> Trace:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidField("body", "an empty file: a trace's CSV starts with a header row") from None
    except csv.Error as err:
        raise InvalidField("body", f"line 1: not CSV ({err})") from None
    matched = _match(header, _CSV_COLUMNS)
    if matched is None:
        raise InvalidField(
            "body", f"the header {header!r} names none of the recognised column sets ({_expected(_CSV_COLUMNS)})"
        )
    fmt, names, unit = matched
    index = [header.index(n) for n in names]
    columns = _Columns(unit, names)
    extra = {key: header.index(found) for key, found in {_norm(h): h for h in header}.items()
             if key in ("session", "turn", "adapter")} if fmt is TraceFormat.csv else {}  # fmt: skip
    try:
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue  # blank lines
            line = reader.line_num
            if len(row) <= max(index):
                raise InvalidField("body", f"line {line}: {len(row)} values where the header has {len(header)}")
            columns.add(line, (row[index[0]], row[index[1]], row[index[2]]))
            cells = {key: row[at].strip() if at < len(row) else None for key, at in extra.items()}
            columns.shared.add(len(columns.arrivals) - 1, cells, ("prefix_hashes", "session", "turn"),
                               f"line {line}: ")  # fmt: skip
    except csv.Error as err:
        raise InvalidField("body", f"line {reader.line_num}: not CSV ({err})") from None
    return columns.trace(name, fmt)


def _line_error(err: InvalidField, line: int) -> InvalidField:
    """An error in one line of a JSON Lines file: the file is the body, the line and its key say where."""
    key = err.field.removeprefix("body").removeprefix(".")
    return InvalidField("body", f"line {line}: {key + ': ' if key else ''}{err.message}", err.kind)


def _jsonl(text: str, name: str) -> Trace:
    columns: _Columns | None = None
    fmt = TraceFormat.jsonl
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            raise InvalidField("body", f"line {line}: not a JSON object") from None
        except RecursionError:  # the json module recurses once per level
            raise _line_error(depth_error("body"), line) from None
        if not isinstance(doc, dict):
            raise InvalidField("body", f"line {line}: not a JSON object")
        try:
            check_json(raw, doc)
        except InvalidField as err:
            raise _line_error(err, line) from None
        if columns is None:  # the first request names the format
            matched = _match(doc, _JSONL_COLUMNS)
            if matched is None:
                raise InvalidField(
                    "body", f"line {line}: its keys name none of the recognised sets ({_expected(_JSONL_COLUMNS)})"
                )
            fmt, names, unit = matched
            columns = _Columns(unit, names)
        missing = [n for n in columns.names if n not in doc]
        if missing:
            raise InvalidField(
                f"body.requests.{len(columns.arrivals)}.{_FIELDS[columns.names.index(missing[0])]}",
                f"line {line}: no {missing[0]!r}",
            )
        columns.add(line, (doc[columns.names[0]], doc[columns.names[1]], doc[columns.names[2]]))
        keys = ("hash_ids", "session", "turn") if fmt is TraceFormat.mooncake else ("prefix_hashes", "session", "turn")
        columns.shared.add(len(columns.arrivals) - 1, doc, keys, f"line {line}: ")
    if columns is None:
        raise InvalidField("body", "an empty file: a trace needs at least one request")
    return columns.trace(name, fmt)
