"""Request traces: recorded arrivals and lengths, stored once (`POST /v1/traces`) and replayed by serving estimates
(`load.trace_id`). A trace is uploaded as a JSON document (`TraceCreate`), or as the CSV or JSON Lines file a trace
was published in (the formats are listed in docs/api.md, "Traces"); either way it is stored as the same
requests, and the same requests are stored once: a trace's id is the digest of its arrivals and lengths."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field

from schemas import limits
from schemas.common import InputModel, ShortText, UtcDatetime
from schemas.inference import Tokens

TRACE_ID_PATTERN = r"^tr_[0-9a-f]{24}$"
TraceId = Annotated[
    str,
    Field(
        pattern=TRACE_ID_PATTERN,
        min_length=27,
        max_length=27,
        description="A stored trace: `tr_` and 24 hexadecimal digits, as `POST /v1/traces` answers it.",
    ),
]
TraceName = ShortText


HashId = Annotated[int, Field(ge=0, le=2**63 - 1)]
Ordinal = Annotated[int, Field(ge=0, le=2**63 - 1)]


class TraceRequest(InputModel):
    """One recorded request: when it arrived (seconds, any origin: a trace is replayed from its first arrival) and
    its prompt and output lengths in tokens; optionally what it shares with others: its prompt's block hashes and
    its session and turn."""

    arrival_s: Annotated[float, Field(ge=0, le=limits.MAX_SECONDS)]
    prompt_tokens: Tokens
    output_tokens: Tokens
    prefix_hashes: list[HashId] | None = Field(
        default=None,
        max_length=limits.MAX_TOKENS,
        description="The prompt's blocks of hash_block_tokens (512 for a serving load's inline trace), in order, at "
        "most ⌈prompt_tokens / block⌉: equal hashes at a position are the same tokens up to that block (Mooncake's "
        "hash_ids). Prefix caching reuses the longest prefix found.",
    )
    session: Ordinal | None = Field(default=None, description="The session (conversation) the request is a turn of.")
    turn: Ordinal | None = Field(
        default=None,
        description="Its turn in the session: a session's turns come in order, each sent no earlier than the turn "
        "before it ends.",
    )
    adapter: Ordinal | None = Field(
        default=None,
        description="The LoRA adapter it runs (null: the base model); adapters of a trace have the engine's "
        "max_lora_rank.",
    )


class TraceCreate(InputModel):
    """A trace as JSON. Arrivals never go backwards."""

    name: TraceName = "trace"
    hash_block_tokens: Annotated[int, Field(ge=1, le=limits.MAX_TOKENS)] = Field(
        default=512, description="Tokens per block of the requests' prefix_hashes (Mooncake's: 512)."
    )
    requests: list[TraceRequest] = Field(min_length=1, max_length=limits.MAX_SERVING_REQUESTS)


class TraceFormat(StrEnum):
    """How a trace arrived: as Ridgeline's JSON document, or as a file with one of the recognised column sets."""

    json = "json"
    csv = "csv"  # arrival_s, prompt_tokens, output_tokens
    jsonl = "jsonl"  # the same keys, one request per line
    azure = "azure"  # Azure LLM inference traces (CSV): TIMESTAMP, ContextTokens, GeneratedTokens
    burstgpt = "burstgpt"  # BurstGPT (CSV): Timestamp, Request tokens, Response tokens
    mooncake = "mooncake"  # Mooncake traces (JSON Lines): timestamp (ms), input_length, output_length, hash_ids


class TokenStats(BaseModel):
    mean: float
    p50: float
    p90: float
    max: int


class TraceRead(BaseModel):
    """A stored trace: what it holds, summarised. Its requests: `GET /v1/traces/{id}/requests`."""

    id: str
    name: str
    format: TraceFormat
    requests: int = Field(description="Requests in the trace.")
    duration_s: float = Field(description="From the first arrival to the last.")
    rate_per_s: float | None = Field(
        description="Mean arrival rate: the gaps between arrivals (requests − 1) over the duration; null for one "
        "instant."
    )
    prompt_tokens: TokenStats
    output_tokens: TokenStats
    created_at: UtcDatetime
