"""The gateway's token-in-token-out chat path (`GatewayConfig.tito` with a tokenizer).

After the gateway's own parsing and max_tokens check: 3. render the messages to ids (sampled
turns spliced in, `_tito`; only a large new text segment is tokenized in a worker thread) and
guard the window with that exact count,
4. call the upstream's `/v1/completions` with the ids, 5. pass errors through and record
nothing, 6. write one trace per valid choice in the disk thread (the prompt as a delta on the
turn it extends, its break cause), 7. answer with an ordinary chat completion.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from forge_rollout import _json_fast as json_fast
from forge_rollout._chat_io import (
    chat_answer,
    check_response_format,
    completion_choices,
    upstream_body,
)
from forge_rollout._guard import check_context, openai_error, refuse_prompt_bytes
from forge_rollout._tito import TooLong
from forge_rollout._traces import TraceFormatError

if TYPE_CHECKING:
    from forge_rollout._gateway import Gateway

INLINE_ENCODE_CHARS = 2048  # a warm session's new text tokenized on the loop up to this (~1 ms)


def json_response(status: int, body: dict[str, Any]) -> web.Response:
    """A JSON answer of the gateway (both paths)."""
    return web.Response(status=status, body=json_fast.dumps(body), content_type="application/json")


def bad_upstream(message: str) -> web.Response:
    """502: the upstream's answer cannot be used (both paths)."""
    return json_response(502, {"error": {"message": message, "type": "bad_upstream", "code": 502}})


async def tito_completion(
    gw: Gateway,
    request: web.Request,
    body: dict[str, Any],
    max_tokens: int | None,
    started: float,
    clock: float,
) -> web.Response:
    renderer, config = gw.renderer, gw.config
    assert renderer is not None, "dispatched only with a renderer"
    session_id = request.match_info["session_id"]
    loop = asyncio.get_running_loop()
    problem = check_response_format(body)
    if problem:
        return json_response(
            400, openai_error(problem, param="response_format", code="unsupported")
        )
    # 3. render to exact ids (the session's state comes from its trace file after a restart)
    try:
        if session_id not in renderer.sessions:
            traces = await gw.disk.run(gw.load_session, session_id)
            state = renderer.session(session_id, lambda: traces)
        else:
            state = renderer.session(session_id, list)
    except TraceFormatError as error:
        message = f"expected this session's trace file to be readable; found: {error}"
        return json_response(500, {"error": {"message": message, "type": "bad_trace", "code": 500}})
    pool = gw.counter.pool  # type: ignore[union-attr]  # a renderer implies TokenizerCounter
    try:
        # the template and the cut run on the loop (pure Python: a thread would only add GIL
        # hand-offs); the new text of a warm session (an observation) is tokenized there too
        # when small; a session's first prompt and any large text go to the pool, where the
        # Rust tokenizer releases the GIL (a slow count never queues other sessions)
        cut = renderer.cut(state, body)
        missing = renderer.missing(state, cut)
        warm = bool(state.segments)
        if not warm or sum(len(text) for text in missing) > INLINE_ENCODE_CHARS:
            encoded = await loop.run_in_executor(pool, renderer.encode, missing)
        else:
            encoded = renderer.encode(missing)
        rendered = renderer.assemble(state, cut, encoded)
    except TooLong as error:
        gw.stats.guard_refused += 1
        bound = renderer.max_prompt_bytes // max(1, config.window)
        return json_response(400, refuse_prompt_bytes(error.prompt_bytes, bound, config.window))
    except Exception as error:  # template errors: a bad request, not a gateway crash
        message = (
            f"expected messages the chat template can render; found {error!r}; fix: send "
            "[{'role': ..., 'content': str}] messages"
        )
        return json_response(400, openai_error(message, param="messages", code="invalid_messages"))
    count_ms = (time.perf_counter() - clock) * 1000
    gw.stats.count_ms.append(count_ms)
    refusal = check_context(rendered.length, max_tokens, config.window, config.reserve)
    if refusal is not None:
        gw.stats.guard_refused += 1
        return json_response(400, refusal)
    delta, cause = renderer.link(state, rendered)
    # 4. the upstream samples from the ids
    headers = {"Content-Type": "application/json"}
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    data = upstream_body(body, rendered.prompt_json(), rendered.length, config.window)
    upstream_clock = time.perf_counter()
    try:
        async with gw.client.post(
            f"{gw.upstream}/v1/completions",
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=config.upstream_timeout),
        ) as answer:
            payload = await answer.read()
            status, content_type = answer.status, answer.headers.get("Content-Type")
    except (TimeoutError, aiohttp.ClientError) as error:
        return gw._upstream_failure(error, "POST /v1/completions")
    upstream_ms = (time.perf_counter() - upstream_clock) * 1000
    gw.stats.upstream_ms.append(upstream_ms)
    # 5. errors pass through unchanged, nothing recorded
    if not 200 <= status < 300:
        gw.stats.upstream_errors += 1
        headers_out = {"Content-Type": content_type} if content_type else None
        return web.Response(status=status, body=payload, headers=headers_out)
    try:
        answer_json = json_fast.loads(payload)
        if not isinstance(answer_json, dict):
            raise ValueError(f"a JSON {type(answer_json).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as error:
        gw.stats.upstream_errors += 1
        return bad_upstream(f"expected a JSON object from the upstream; found {error}")
    counted = (answer_json.get("usage") or {}).get("prompt_tokens")
    if counted is not None and counted != rendered.length:
        gw.stats.upstream_errors += 1
        return bad_upstream(
            f"expected the upstream to sample from the {rendered.length} prompt ids sent; it "
            f"reports {counted} prompt tokens; fix: serve the model whose tokenizer the "
            "gateway was given, with max_model_len = the gateway's window"
        )
    choices, problems = completion_choices(answer_json)
    asked_ids = bool(body.get("return_token_ids"))
    tokenizer = renderer.tokenizer
    out = chat_answer(answer_json, choices, body, tokenizer, rendered.ids() if asked_ids else None)
    # 6. record, only for a client that is still there to receive the answer
    if request.transport is None or request.transport.is_closing():
        gw.stats.client_disconnects += 1
        return json_response(status, out)
    if problems:
        gw.stats.untraced_choices += len(problems)
        gw.stats.last_untraced = problems[-1]
    records = [
        {
            "choice_index": choice["index"],
            "prompt": delta,
            "completion_token_ids": choice["ids"],
            "logprobs": choice["logprobs"],
            "finish_reason": choice["finish_reason"],
            "stop_reason": choice["stop_reason"],
            "completion_text": choice["text"],
            "rendered_by": "gateway",
            "spliced_turns": rendered.spliced,
            "break_cause": cause,
        }
        for choice in choices
    ]
    model = str(body.get("model") or answer_json.get("model") or "")
    try:
        seqs = await gw.record(
            session_id, "chat.completions", body, model, records, started, count_ms,
            upstream_ms, clock,
        )  # fmt: skip
    except OSError as error:
        return gw._trace_failure(error)
    answered = [(seq, c["text"], c["ids"]) for seq, c in zip(seqs, choices, strict=True)]
    renderer.remember(state, rendered, answered)
    gw.stats.tito_calls += 1
    gw.stats.spliced_turns += rendered.spliced
    if cause is not None:
        gw.stats.breaks[cause] += 1
    gw.stats.overhead_ms.append((time.perf_counter() - clock) * 1000 - upstream_ms)
    # 7. answer
    return json_response(status, out)
