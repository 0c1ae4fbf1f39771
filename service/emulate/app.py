"""The emulated engine's HTTP API: OpenAI's `/v1/completions`, `/v1/chat/completions` (streamed over server-sent
events, as vLLM, SGLang and TensorRT-LLM serve them) and `/v1/models`.

A prompt's tokens are its whitespace-separated words (`prompt_tokens`), and the answer is `max_tokens` words (or
`max_completion_tokens`; the default `default_output_tokens`): the emulated engine never stops early, as a load
test's `ignore_eos` asks. A load-testing tool given a word-level tokenizer counts the same tokens (docs/emulate.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from roofline.serving import LiveServing, ServingConfigError
from service.emulate.driver import Driver, Stream

WORD = "tok"  # every output token: one word


@dataclass(frozen=True)
class Emulated:
    """The deployment served: its engines, the model name answered, and what it is (for /v1/models)."""

    make: Callable[[], LiveServing]
    model: str
    description: dict[str, Any]
    default_output_tokens: int = 256


def prompt_tokens(text: str) -> int:
    return len(text.split())


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    # OpenAI's error object (the shape the tools parse)
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": param}}, status)


def _text_of(body: dict[str, Any], chat: bool) -> str | None:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        parts = []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):  # content parts: their text
                parts += [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = " ".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else None


def _sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def create_emulator(emulated: Emulated) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        driver = Driver(emulated.make())
        driver.start()
        app.state.driver = driver
        yield
        await driver.stop()

    app = FastAPI(title="Ridgeline emulated engine", lifespan=lifespan)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": emulated.model, "object": "model", "created": 0,
                                            "owned_by": "ridgeline", "deployment": emulated.description}]}  # fmt: skip

    @app.get("/health")
    async def health() -> dict[str, Any]:
        driver: Driver = app.state.driver
        return {"status": "ok", "served": driver.served, "in_flight": len(driver.streams),
                "simulated_sums": driver.sums}  # fmt: skip

    async def complete(request: Request, chat: bool) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the body is not a JSON object")
        text = _text_of(body, chat)
        if text is None:
            return _error(
                400, "messages: a list of messages" if chat else "prompt: a string", "messages" if chat else "prompt"
            )
        out = next((body[k] for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None),
                   emulated.default_output_tokens)  # fmt: skip
        if not isinstance(out, int) or isinstance(out, bool) or out < 1:
            return _error(400, "max_tokens: a positive integer", "max_tokens")
        n_prompt = max(1, prompt_tokens(text))
        driver: Driver = request.app.state.driver
        try:
            stream = driver.submit(n_prompt, out)
        except ServingConfigError as err:
            return _error(400, err.message, "max_tokens")
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        usage = {"prompt_tokens": n_prompt, "completion_tokens": out, "total_tokens": n_prompt + out}
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
            return StreamingResponse(
                _chunks(stream, ident, emulated.model, chat, usage if include_usage else None),
                media_type="text/event-stream",
            )
        async for _ in _tokens(stream):
            pass
        text_out = " ".join([WORD] * out)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text_out}
        else:
            choice["text"] = text_out
        return JSONResponse({"id": ident, "object": "chat.completion" if chat else "text_completion",
                             "created": int(time.time()), "model": emulated.model, "choices": [choice],
                             "usage": usage})  # fmt: skip

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    return app


async def _tokens(stream: Stream) -> AsyncIterator[int]:
    """The request's tokens, as many at a time as the simulation made at once."""
    while True:
        event = await stream.queue.get()
        if event.tokens:
            yield event.tokens
        if event.done:
            return


async def _chunks(
    stream: Stream, ident: str, model: str, chat: bool, usage: dict[str, int] | None
) -> AsyncIterator[bytes]:
    created = int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"
    first = True
    async for n in _tokens(stream):
        text = " ".join([WORD] * n) + " "
        choice: dict[str, Any] = {"index": 0, "finish_reason": None, "logprobs": None}
        if chat:
            choice["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
        else:
            choice["text"] = text
        first = False
        yield _sse({"id": ident, "object": kind, "created": created, "model": model, "choices": [choice]})
    end: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
    if chat:
        end["delta"] = {}
    else:
        end["text"] = ""
    yield _sse({"id": ident, "object": kind, "created": created, "model": model, "choices": [end]})
    if usage is not None:
        yield _sse({"id": ident, "object": kind, "created": created, "model": model, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"
