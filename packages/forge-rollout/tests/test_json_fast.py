"""The gateway's JSON (`_json_fast`): orjson's speed, the standard library's results.

Every document `json.loads` reads parses to the same value (NaN, big integers, lone
surrogates, UTF-16 included); every value serialises to the JSON `json.dumps` writes for it.
Values are compared through `json.dumps`, which tells NaN, key order, int from float and
`1` from `True` apart.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_rollout import _json_fast as json_fast

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # surrogates included
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=30,
)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a) == json.dumps(b)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_loads_gives_what_json_loads_gives(value: Any) -> None:
    ascii_only, wide = json.dumps(value), json.dumps(value, ensure_ascii=False)
    documents: list[str | bytes] = [ascii_only, ascii_only.encode(), wide]
    with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate has no UTF-8 form
        documents.append(wide.encode("utf-8"))
    for document in documents:
        assert _same(json_fast.loads(document), json.loads(document)), document


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_dumps_writes_the_json_json_dumps_writes(value: Any) -> None:
    written = json_fast.dumps(value)
    assert isinstance(written, bytes)
    standard = json.dumps(value, separators=(",", ":"))
    assert _same(json.loads(written), json.loads(standard))  # NaN read back as null: differ


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (b"[18446744073709551616]", [2**64]),  # orjson: a float
        (b"[-9223372036854775809]", [-(2**63) - 1]),  # orjson: a float
        (b'{"seed": 1180591620717411303424}', {"seed": 2**70}),
        (b"[18446744073709551615, -9223372036854775808]", [2**64 - 1, -(2**63)]),  # orjson's own
        (b'"\\ud800"', "\ud800"),  # orjson refuses a lone surrogate
        ('{"a": 1}'.encode("utf-16"), {"a": 1}),  # orjson reads UTF-8 only
    ],
)
def test_loads_where_orjson_differs(document: bytes, expected: Any) -> None:
    assert _same(json_fast.loads(document), expected)


def test_loads_keeps_non_standard_constants_and_errors() -> None:
    parsed = json_fast.loads(b'{"logprob": -Infinity, "x": NaN, "big": 1e400}')
    assert parsed["logprob"] == -math.inf and math.isnan(parsed["x"]) and parsed["big"] == math.inf
    with pytest.raises(json.JSONDecodeError):
        json_fast.loads(b'{"messages": [')
    with pytest.raises(UnicodeDecodeError):
        json_fast.loads(b"\xff")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"logprobs": [-0.5, float("-inf")]}, b'{"logprobs":[-0.5,-Infinity]}'),
        ([None, float("nan"), "x"], b'[null,NaN,"x"]'),
        ({"n": 2**70}, b'{"n":1180591620717411303424}'),
        ({1: "a"}, b'{"1":"a"}'),
        (["\ud800"], b'["\\ud800"]'),
        ([1e308, 1e308], b"[1e+308,1e+308]"),  # a sum that overflows: the slow path, same JSON
    ],
)
def test_dumps_where_orjson_differs(value: Any, expected: bytes) -> None:
    assert json_fast.dumps(value) == expected


def test_dumps_refuses_what_json_refuses() -> None:
    import dataclasses
    import datetime

    @dataclasses.dataclass
    class Point:
        x: int

    for value in (Point(1), datetime.date(2026, 1, 1), {1, 2}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            json_fast.dumps(value)
