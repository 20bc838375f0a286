"""The stub upstream counts prompt tokens as the tests and the 32K bench expect."""

from __future__ import annotations

import json
import urllib.request

from forge_rollout import StubOptions, create_stub_app, run_app_in_thread
from forge_rollout.testing._stub import prompt_ids

CHAT = {"messages": [{"role": "user", "content": "abcdef"}, {"role": "user", "content": "g"}]}


def test_prompt_ids_are_the_bytes_or_every_nth_byte() -> None:
    assert prompt_ids(CHAT) == list(b"abcdefg")
    assert prompt_ids(CHAT, bytes_per_token=2) == list(b"aceg")
    assert prompt_ids(CHAT, bytes_per_token=3) == list(b"adg")
    assert prompt_ids({"prompt": "xyz"}, bytes_per_token=2) == list(b"xz")
    assert prompt_ids({"prompt": [5, 6, 7]}, bytes_per_token=2) == [5, 6, 7]  # ids as they are


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_a_chat_answer_echoes_as_many_prompt_ids_as_tokenize_counts() -> None:
    app = create_stub_app(StubOptions(bytes_per_token=2, completion_tokens=3))
    with run_app_in_thread(app) as url:
        answer = _post(f"{url}/v1/chat/completions", {**CHAT, "return_token_ids": True})
        count = _post(f"{url}/tokenize", CHAT)["count"]
    assert answer["prompt_token_ids"] == list(b"aceg")
    assert answer["usage"]["prompt_tokens"] == count == 4
    assert answer["choices"][0]["token_ids"] == [1, 2, 3]
