"""A stub vLLM upstream with fault injection, for tests and the gateway bench.

Prompt "tokens" are the UTF-8 bytes of the message contents joined (or of the text prompt),
so a test knows every prompt's exact length; `/tokenize` counts the same way (with
`bytes_per_token` > 1, every n-th byte: a bench's prompt ids then have a real tokenizer's
count). The completion is `completion_tokens` ids 1, 2, 3, ... each with log-prob -0.5.
The request's `model` picks a fault: `fault-500`, `fault-400`, `fault-hang` (sleeps
`hang_s`), `fault-slow` (sleeps 0.5 s, then answers), `fault-drop` (closes the connection),
`fault-badjson`, `fault-empty` (no completion ids), `fault-nologprobs`, `fault-tokenize` (500
from /tokenize). `canned=True`
answers every call with the same precomputed bytes (the bench's trivial upstream).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

STUB_MODEL = "stub"


class StubOptions(BaseModel):
    """How the stub answers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int = Field(default=4096, ge=1, description="max_model_len it reports.")
    completion_tokens: int = Field(default=4, ge=0, description="Ids per completion.")
    hang_s: float = Field(default=30.0, ge=0, description="How long fault-hang sleeps.")
    canned: bool = Field(default=False, description="One precomputed answer for every call.")
    canned_prompt_tokens: int = Field(default=256, ge=1, description="Canned prompt length.")
    latency_ms: float = Field(
        default=0.0, ge=0, description="Model time per call (awaited: calls overlap, as batched)."
    )
    bytes_per_token: int = Field(
        default=1,
        ge=1,
        description="Text prompts count one token per this many UTF-8 bytes (1: every byte). "
        "The long-prompt bench passes its tokenizer's ratio, so that the prompt ids a chat "
        "answer echoes (return_token_ids) have a real model's length, not 2-4x it.",
    )
    keep_bodies: bool = Field(
        default=True,
        description="Keep every request body in `StubState.bodies` (tests read them; a bench "
        "with 32K-id prompts turns it off: millions of kept ints slow the stub's garbage "
        "collector by tens of ms per call).",
    )


def prompt_ids(body: dict[str, Any], bytes_per_token: int = 1) -> list[int]:
    """The stub's tokenization: UTF-8 bytes of the contents (chat) or of the prompt (every
    `bytes_per_token`-th byte); an id prompt as it is."""
    if "messages" in body:
        text = "".join(str(m.get("content") or "") for m in body["messages"])
    else:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        text = str(prompt)
    return list(text.encode("utf-8")[::bytes_per_token])


def vllm_answer(body: dict[str, Any], ids: list[int], completion_tokens: int) -> dict[str, Any]:
    """A vLLM-shaped answer; ids and log-probs only where the request asked for them."""
    chat = "messages" in body
    completion = list(range(1, completion_tokens + 1))
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "stop_reason": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": "x" * len(completion)}
        entries = [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}]
        choice["logprobs"] = (
            {"content": entries * len(completion)} if body.get("logprobs") else None
        )
    else:
        choice["text"] = "x" * len(completion)
        names = (
            [f"token_id:{t}" for t in completion]
            if body.get("return_tokens_as_token_ids")
            else ["x"] * len(completion)
        )
        lp = {"tokens": names, "token_logprobs": [-0.5] * len(completion)}
        choice["logprobs"] = lp if body.get("logprobs") is not None else None
    answer: dict[str, Any] = {
        "id": "chatcmpl-stub" if chat else "cmpl-stub",
        "object": "chat.completion" if chat else "text_completion",
        "created": 0,
        "model": body.get("model") or STUB_MODEL,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(ids),
            "completion_tokens": len(completion),
            "total_tokens": len(ids) + len(completion),
        },
    }
    if body.get("return_token_ids"):
        choice["token_ids"] = completion
        if chat:
            answer["prompt_token_ids"] = ids
        else:
            choice["prompt_token_ids"] = ids
    return answer


class StubState:
    """What the stub has seen: calls per (path, model), for 'never forwarded' checks."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.bodies: list[dict[str, Any]] = []


STATE = web.AppKey("stub_state", StubState)


def create_stub_app(options: StubOptions | None = None) -> web.Application:
    """The stub upstream as an aiohttp app; `app[STATE]` records what it was asked."""
    options = options or StubOptions()
    state = StubState()
    canned_prompt = list(range(10, 10 + options.canned_prompt_tokens))
    canned_body = {"messages": [], "logprobs": True, "return_token_ids": True}
    canned = json.dumps(vllm_answer(canned_body, canned_prompt, options.completion_tokens))
    canned_bytes = canned.encode()
    canned_count = json.dumps({"count": len(canned_prompt), "max_model_len": options.window})

    async def completion(request: web.Request) -> web.StreamResponse:
        if options.latency_ms:
            await asyncio.sleep(options.latency_ms / 1000)
        if options.canned:
            return web.Response(body=canned_bytes, content_type="application/json")
        body = await request.json()
        model = str(body.get("model") or STUB_MODEL)
        state.calls[(request.path, model)] += 1
        if options.keep_bodies:
            state.bodies.append(body)
        if model == "fault-500":
            error = {"message": "stub crashed", "type": "InternalServerError", "code": 500}
            return web.json_response({"error": error}, status=500)
        if model == "fault-400":
            error = {"message": "stub refuses", "type": "BadRequestError", "code": 400}
            return web.json_response({"error": error}, status=400)
        if model == "fault-hang":
            await asyncio.sleep(options.hang_s)
        if model == "fault-slow":
            await asyncio.sleep(0.5)
        if model == "fault-drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=200)
        if model == "fault-badjson":
            return web.Response(body=b'{"choices": [', content_type="application/json")
        ids = prompt_ids(body, options.bytes_per_token)
        answer = vllm_answer(body, ids, options.completion_tokens)
        choice = answer["choices"][0]
        if model == "fault-empty" and "token_ids" in choice:
            choice["token_ids"] = []
        if model == "fault-nologprobs":
            choice["logprobs"] = None
        return web.json_response(answer)

    async def tokenize(request: web.Request) -> web.Response:
        if options.canned:
            return web.Response(text=canned_count, content_type="application/json")
        body = await request.json()
        state.calls[(request.path, str(body.get("model") or STUB_MODEL))] += 1
        if body.get("model") == "fault-tokenize":
            error = {"message": "tokenizer broke", "type": "InternalServerError", "code": 500}
            return web.json_response({"error": error}, status=500)
        ids = prompt_ids(body, options.bytes_per_token)
        return web.json_response(
            {"count": len(ids), "max_model_len": options.window, "tokens": ids}
        )

    async def models(request: web.Request) -> web.Response:
        card = {"id": STUB_MODEL, "object": "model", "max_model_len": options.window}
        return web.json_response({"object": "list", "data": [card]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    app[STATE] = state
    app.router.add_post("/v1/chat/completions", completion)
    app.router.add_post("/v1/completions", completion)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app
