"""The context guard: pure checks on a request's max_tokens and its exact prompt length.

Rule (DESIGN §4, Rollout): `max_tokens <= 0`, or prompt + max_tokens (prompt alone when
max_tokens is absent) beyond `window - reserve`, is answered with an OpenAI-style HTTP 400
`context_length_exceeded` and never forwarded. vLLM would answer max_tokens 0 with its own
400, but it silently CLAMPS prompt + max_tokens beyond the window (FACTS.md); the guard makes
both fail the same loud way before the model is called.
"""

from __future__ import annotations

from typing import Any


def openai_error(message: str, *, param: str | None, code: str) -> dict[str, Any]:
    """OpenAI's error body: type `invalid_request_error`, a string `code`."""
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }


def requested_max_tokens(body: dict[str, Any]) -> tuple[int | None, str | None]:
    """The request's completion limit (`max_tokens`, else `max_completion_tokens`).

    Returns (value or None when absent, None) or (None, error message) for a non-integer.
    """
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            return None, (
                f"expected {key} to be an integer; found {value!r}; fix: send an integer >= 1"
            )
        return int(value), None
    return None, None


def check_max_tokens(max_tokens: int | None, window: int) -> dict[str, Any] | None:
    """The guard's answer to `max_tokens <= 0`, or None when max_tokens is absent or >= 1."""
    if max_tokens is None or max_tokens >= 1:
        return None
    return openai_error(
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"max_tokens={max_tokens}, and max_tokens must be at least 1. "
        "Fix: send max_tokens >= 1, or leave it out.",
        param="max_tokens",
        code="context_length_exceeded",
    )


def check_context(
    prompt_tokens: int, max_tokens: int | None, window: int, reserve: int
) -> dict[str, Any] | None:
    """The guard's answer when the request does not fit `window - reserve`, else None.

    Fits iff prompt_tokens + (max_tokens or 0) <= window - reserve (the boundary fits).
    """
    budget = window - reserve
    wanted = prompt_tokens + (max_tokens or 0)
    if wanted <= budget:
        return None
    if max_tokens is None:
        asked = f"{prompt_tokens} tokens in the messages (and no max_tokens)"
    else:
        asked = f"{wanted} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion)"
    return openai_error(
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{asked}; the gateway keeps {reserve} tokens in reserve, so at most {budget} fit. "
        "Please reduce the length of the messages or completion.",
        param="messages",
        code="context_length_exceeded",
    )


def refuse_prompt_bytes(prompt_bytes: int, max_token_bytes: int, window: int) -> dict[str, Any]:
    """The guard's answer to a prompt too long in bytes to fit (no token spans more bytes).

    A prompt of B bytes has at least ceil(B / max_token_bytes) tokens, so B > window *
    max_token_bytes cannot fit; the gateway refuses it without tokenizing it.
    """
    if max_token_bytes < 1 or prompt_bytes <= window * max_token_bytes:
        raise ValueError(
            f"refuse_prompt_bytes: expected a prompt over window * max_token_bytes = {window} * "
            f"{max_token_bytes} bytes (max_token_bytes >= 1), the only one it may call too "
            f"long; found {prompt_bytes} bytes; fix: tokenize and count it (it may fit)"
        )
    at_least = -(-prompt_bytes // max_token_bytes)  # ceil(B / max_token_bytes) > window
    return openai_error(
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"at least {at_least} tokens: the messages are {prompt_bytes} bytes and no token spans "
        f"more than {max_token_bytes} bytes, so at most {window * max_token_bytes} bytes can "
        "fit. Please reduce the length of the messages.",
        param="messages",
        code="context_length_exceeded",
    )


def refuse_body_size(body_bytes: int | None, limit: int, window: int) -> dict[str, Any]:
    """The guard's answer to a request body over the gateway's byte cap (never read whole).

    `body_bytes` is the declared Content-Length, or None for a chunked body cut at the cap.
    """
    size = f"{body_bytes} bytes" if body_bytes is not None else f"over {limit} bytes (chunked)"
    return openai_error(
        f"This model's maximum context length is {window} tokens. However, the request body "
        f"is {size}, more than the {limit} bytes the gateway accepts (no prompt "
        "this long can fit the window). Please reduce the length of the messages (or raise "
        "the gateway's max_body_bytes if the body is mostly not prompt).",
        param="messages",
        code="context_length_exceeded",
    )
