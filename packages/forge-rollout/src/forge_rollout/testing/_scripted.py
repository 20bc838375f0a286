"""A scripted policy upstream: vLLM-shaped chat answers whose actions come from a script.

Token ids are the UTF-8 bytes of the text (log-prob -0.5 each), as the stub's. The script is
chosen by the instruction in the first user message (`solutions`: instruction text -> bash
script): on the first `len(explore)` calls the action is `explore[i]` (reading the repository,
as an agent would), then the task's script, then the submit command. `latency_s` is the model
time of every call (awaited, so calls overlap as a batched server's do): the rollout bench's
fixed model time. With `hung`, every call records its arrival time there and hangs 30 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

SCRIPTED_MODEL = "scripted"
SCRIPTED_WINDOW = 1_000_000
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _ids(body: dict[str, Any]) -> list[int]:
    return list("".join(str(m.get("content") or "") for m in body["messages"]).encode())


def _answer(body: dict[str, Any], content: str) -> dict[str, Any]:
    completion = list(content.encode())
    entries = [
        {"token": chr(t), "logprob": -0.5, "bytes": [t], "top_logprobs": []} for t in completion
    ]
    prompt = _ids(body)
    return {
        "id": SCRIPTED_MODEL,
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "prompt_token_ids": prompt,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "stop_reason": None,
                "message": {"role": "assistant", "content": content},
                "token_ids": completion,
                "logprobs": {"content": entries},
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(completion),
            "total_tokens": len(prompt) + len(completion),
        },
    }


def _action(solutions: dict[str, str], explore: Sequence[str], messages: list[Any]) -> str:
    """The bash action of this turn: explore[turn], then the task's script, then submit."""
    turns = sum(1 for m in messages if m["role"] == "assistant")
    if turns < len(explore):
        return f"THOUGHT: look around\n```mswea_bash_command\n{explore[turns]}\n```"
    if turns == len(explore):
        instruction = str(messages[1]["content"])
        script = next((s for key, s in solutions.items() if key in instruction), None)
        if script is None:
            raise web.HTTPBadRequest(
                text="scripted upstream: expected an instruction among the scripted tasks; "
                f"found {instruction[:120]!r}; fix: pass that task's solution"
            )
        return f"THOUGHT: apply the fix\n```mswea_bash_command\n{script}\n```"
    return f"THOUGHT: done\n```mswea_bash_command\n{SUBMIT}\n```"


def scripted_upstream(
    solutions: dict[str, str],
    *,
    explore: Sequence[str] = (),
    latency_s: float = 0.0,
    hung: list[float] | None = None,
) -> web.Application:
    """The scripted policy as an aiohttp app (serve it with `run_app_in_thread`)."""
    if latency_s < 0:
        raise ValueError(f"latency_s: expected >= 0; found {latency_s}; fix: pass a model time")

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if hung is not None:
            hung.append(time.monotonic())
            await asyncio.sleep(30)
        if latency_s:
            await asyncio.sleep(latency_s)
        return web.json_response(_answer(body, _action(solutions, explore, body["messages"])))

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        count = len(_ids(body)) if "messages" in body else len(str(body.get("prompt", "")).encode())
        return web.json_response({"count": count, "max_model_len": SCRIPTED_WINDOW, "tokens": []})

    async def models(request: web.Request) -> web.Response:
        card = {"id": SCRIPTED_MODEL, "object": "model", "max_model_len": SCRIPTED_WINDOW}
        return web.json_response({"object": "list", "data": [card]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app
