"""The context guard's pure checks: which requests it refuses, at the exact boundaries
(max_tokens = 1, prompt + max_tokens = window - reserve), and the OpenAI-style 400 bodies."""

from __future__ import annotations

import pytest

from forge_rollout.gateway._guard import (
    check_context,
    check_max_tokens,
    openai_error,
    refuse_body_size,
    refuse_prompt_bytes,
    requested_max_tokens,
)

WINDOW, RESERVE = 512, 16


def test_openai_error_body():
    assert openai_error("m", param="p", code="c") == {
        "error": {"message": "m", "type": "invalid_request_error", "param": "p", "code": "c"}
    }
    assert openai_error("m", param=None, code="c")["error"]["param"] is None


# ------------------------------------------------------------------ max_tokens
@pytest.mark.parametrize("max_tokens", [None, 1, 2, 10_000])
def test_max_tokens_absent_or_at_least_one_passes(max_tokens):
    assert check_max_tokens(max_tokens, WINDOW) is None


@pytest.mark.parametrize("max_tokens", [0, -1, -5])
def test_max_tokens_below_one_is_refused_with_the_numbers(max_tokens):
    assert check_max_tokens(max_tokens, WINDOW) == {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, you "
            f"requested max_tokens={max_tokens}, and max_tokens must be at least 1. "
            "Fix: send max_tokens >= 1, or leave it out.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "context_length_exceeded",
        }
    }


# ------------------------------------------------------------------ the window
@pytest.mark.parametrize(
    ("prompt", "max_tokens"),
    [(495, 1), (0, 496), (496, None), (0, None), (100, 1), (495, None)],
)
def test_requests_that_fit_pass(prompt, max_tokens):
    assert check_context(prompt, max_tokens, WINDOW, RESERVE) is None


def test_one_over_with_max_tokens_one():
    # max_tokens = 1 is the smallest valid request: one token over the budget is refused
    assert check_context(496, 1, WINDOW, RESERVE) == {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, you "
            "requested 497 tokens (496 in the messages, 1 in the completion); the gateway keeps "
            "16 tokens in reserve, so at most 496 fit. Please reduce the length of the messages "
            "or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_prompt_alone_over_the_budget():
    assert check_context(497, None, WINDOW, RESERVE) == {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, you "
            "requested 497 tokens in the messages (and no max_tokens); the gateway keeps 16 "
            "tokens in reserve, so at most 496 fit. Please reduce the length of the messages "
            "or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_zero_reserve_and_whole_window():
    assert check_context(511, 1, WINDOW, 0) is None
    assert check_context(512, 1, WINDOW, 0) is not None


# ------------------------------------------------------------------ reading the request
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, (None, None)),
        ({"max_tokens": None}, (None, None)),
        ({"max_tokens": 1}, (1, None)),
        ({"max_tokens": 0}, (0, None)),
        ({"max_tokens": -3}, (-3, None)),
        ({"max_tokens": 7.0}, (7, None)),
        ({"max_completion_tokens": 5}, (5, None)),
        ({"max_tokens": None, "max_completion_tokens": 5}, (5, None)),
        ({"max_tokens": 3, "max_completion_tokens": 5}, (3, None)),  # max_tokens wins
    ],
)
def test_requested_max_tokens(body, expected):
    value, problem = requested_max_tokens(body)
    assert (value, problem) == expected
    assert value is None or type(value) is int


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({"max_tokens": "7"}, "max_tokens to be an integer; found '7'"),
        ({"max_tokens": True}, "max_tokens to be an integer; found True"),
        ({"max_tokens": 7.5}, "max_tokens to be an integer; found 7.5"),
        ({"max_tokens": [1]}, "max_tokens to be an integer; found [1]"),
        ({"max_completion_tokens": False}, "max_completion_tokens to be an integer; found False"),
        ({"max_tokens": 2, "max_completion_tokens": "x"}, None),  # max_tokens decides first
    ],
)
def test_requested_max_tokens_refuses_non_integers(body, shown):
    value, problem = requested_max_tokens(body)
    if shown is None:
        assert (value, problem) == (2, None)
        return
    assert value is None
    assert problem == f"expected {shown}; fix: send an integer >= 1"


# ------------------------------------------------------------------ too long in bytes
@pytest.mark.parametrize(
    ("prompt_bytes", "max_token_bytes", "at_least"),
    [
        (2049, 4, 513),  # one byte over window * 4: ceil(2049 / 4) = 513 tokens
        (2052, 4, 513),  # a whole token over: still 513
        (2053, 4, 514),
        (513, 1, 513),
        (5121, 10, 513),
        (7000, 7, 1000),
    ],
)
def test_a_prompt_too_long_in_bytes_names_at_least_how_many_tokens(
    prompt_bytes, max_token_bytes, at_least
):
    assert refuse_prompt_bytes(prompt_bytes, max_token_bytes, WINDOW) == {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, you "
            f"requested at least {at_least} tokens: the messages are {prompt_bytes} bytes and no "
            f"token spans more than {max_token_bytes} bytes, so at most "
            f"{WINDOW * max_token_bytes} bytes can fit. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    assert at_least > WINDOW


@pytest.mark.parametrize(("prompt_bytes", "max_token_bytes"), [(2048, 4), (1, 4), (512, 1), (9, 0)])
def test_a_prompt_that_may_fit_is_never_called_too_long(prompt_bytes, max_token_bytes):
    with pytest.raises(ValueError) as info:
        refuse_prompt_bytes(prompt_bytes, max_token_bytes, WINDOW)
    assert str(info.value) == (
        f"refuse_prompt_bytes: expected a prompt over window * max_token_bytes = {WINDOW} * "
        f"{max_token_bytes} bytes (max_token_bytes >= 1), the only one it may call too long; "
        f"found {prompt_bytes} bytes; fix: tokenize and count it (it may fit)"
    )


@pytest.mark.parametrize(
    ("body_bytes", "size"), [(2_000_000, "2000000 bytes"), (None, "over 1048576 bytes (chunked)")]
)
def test_a_body_over_the_cap_is_refused_with_its_size(body_bytes, size):
    assert refuse_body_size(body_bytes, 1_048_576, WINDOW) == {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, the "
            f"request body is {size}, more than the 1048576 bytes the gateway accepts (no prompt "
            "this long can fit the window). Please reduce the length of the messages (or raise "
            "the gateway's max_body_bytes if the body is mostly not prompt).",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
