"""``json_walk``: the JSON round trip's answer without the text in between (records' ``to_dict``
and the web's ``plain`` use it on every row of a page). ``fastjson``: orjson's text, read and
written as the standard module does it (the API's answers, the store's JSON columns)."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime
from enum import Enum, IntEnum
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpusteward.domain import fastjson
from gpusteward.domain.records import jsonable
from gpusteward.web.data import _default, json_bytes, plain


def _round_trip(value: Any, default: Any) -> Any:
    return json.loads(json.dumps(value, default=default), parse_constant=lambda _: None)


class Colour(Enum):
    RED = "red"


class Rank(IntEnum):
    HIGH = 3


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included: null
    st.text(max_size=5),
    st.datetimes(timezones=st.just(UTC)),
    st.dates(),
    st.sampled_from([Colour.RED, Rank.HIGH, b"x", 1.5j]),  # enums, an int subclass, str() defaults
    st.floats().map(np.float64),  # a float subclass: written as the float
)
keys = st.one_of(st.text(max_size=4), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    # Equal, and equal in type too (1 and 1.0 and True compare equal).
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


@given(values)
def test_jsonable_is_the_round_trip(value: Any) -> None:
    assert _same(jsonable(value), _round_trip(value, str))


@given(values)
def test_web_plain_is_the_round_trip(value: Any) -> None:
    assert _same(plain(value), _round_trip(value, _default))


def test_the_cases_that_matter() -> None:
    at = datetime(2026, 2, 3, 12, 36, tzinfo=UTC)
    row = {"at": at, "day": date(2026, 2, 3), "x": math.nan, "gpus": ("a",), "n": {1: math.inf}}
    assert plain(row) == {
        "at": at.isoformat(),
        "day": "2026-02-03",
        "x": None,
        "gpus": ["a"],
        "n": {"1": None},
    }
    assert jsonable({"at": at, "v": [math.nan, 2.0]}) == {"at": str(at), "v": [None, 2.0]}


@given(values)
def test_web_json_bytes_is_the_text_of_plain(value: Any) -> None:
    # orjson where it writes what json would, the json module where it would not (keys that
    # are not strings, integers past 64 bits): the same JSON either way.
    assert _same(json.loads(json_bytes(value)), plain(value))


@given(values)
def test_fastjson_loads_reads_what_json_reads(value: Any) -> None:
    text = json.dumps(value, default=str)  # NaN and Infinity literals, integers of any size
    assert _same(fastjson.loads(text), json.loads(text))
    assert _same(fastjson.loads(memoryview(text.encode())), json.loads(text))


def test_json_bytes_cases() -> None:
    at = datetime(2026, 2, 3, 12, 36, tzinfo=UTC)
    assert json_bytes({"at": at, "x": np.float64("nan"), "k": (Rank.HIGH, Colour.RED)}) == (
        b'{"at":"2026-02-03T12:36:00+00:00","x":null,"k":[3,"red"]}'
    )
    assert json.loads(json_bytes({1: 2**70})) == {"1": 2**70}  # the json module's answer
    assert fastjson.dumps({1: 2}, str) is None


@given(values)
def test_fastjson_dumps_text_writes_what_json_writes(value: Any) -> None:
    # The store's JSON columns: what it writes is jsonable; the text reads back as json's would.
    plain_value = jsonable(value)
    text = fastjson.dumps_text(plain_value)
    assert isinstance(text, str)
    assert _same(json.loads(text), _round_trip(plain_value, None))


def test_fastjson_dumps_text_cases() -> None:
    assert fastjson.dumps_text({"u": {"GPU-0": math.nan}, "g": ["a"]}) == '{"u":{"GPU-0":null},"g":["a"]}'
    assert fastjson.dumps_text({1: 2**70}) == '{"1":1180591620717411303424}'  # json's fallback, compact
    with pytest.raises(TypeError, match="not JSON serializable"):
        fastjson.dumps_text({"at": datetime(2026, 1, 1, tzinfo=UTC)})  # as json.dumps refuses it
