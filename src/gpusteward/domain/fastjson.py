"""JSON text in and out through orjson, with the standard library's answer wherever orjson's
would differ.

The pages and the API turn hundreds of records a request into JSON and the store decodes a JSON
column or two per row read; the standard ``json`` module was a third of a findings request's
time. orjson reads and writes the same JSON but differs on a few things the standard module
takes: ``NaN`` and ``Infinity`` literals when reading (and integers beyond 64 bits, which it reads
as floats), dict keys that are not strings and integers beyond 64 bits when writing. Those go to
``json``, so every answer stays the standard one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson

#: Datetimes and dataclasses go to the caller's ``default`` (as ``json.dumps`` would send them),
#: not orjson's own formats.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


#: 19 digits in a row: perhaps an integer orjson would read as a float (below -2**63, from 2**64).
_LONG_DIGITS = re.compile(r"\d{19}")
_LONG_DIGITS_BYTES = re.compile(rb"\d{19}")


def loads(text: str | bytes | bytearray | memoryview) -> Any:
    """``json.loads``, faster."""
    long_digits = _LONG_DIGITS if isinstance(text, str) else _LONG_DIGITS_BYTES
    if long_digits.search(text) is None:  # type: ignore[arg-type]  # str with str, bytes with bytes
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # NaN or Infinity: json reads them
            pass
    return json.loads(bytes(text) if isinstance(text, memoryview) else text)


def dumps(value: Any, default: Callable[[Any], Any]) -> bytes | None:
    """Compact UTF-8 JSON of ``value``, NaN and infinities as null, anything else ``default``
    converts (a float subclass such as numpy's is written as the float it is, as ``json`` does).
    None when orjson cannot write it the standard way: the caller falls back to ``json``."""

    def other(v: Any) -> Any:
        return float(v) if isinstance(v, float) else default(v)

    try:
        return orjson.dumps(value, default=other, option=_OPTIONS)
    except orjson.JSONEncodeError:  # a key that is not a string, an int past 64 bits, deep nesting
        return None


def _unwritable(v: Any) -> Any:
    raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def dumps_text(value: Any) -> str:
    """A JSON column's text (the store's serializer), faster than ``json.dumps``: compact, NaN
    and infinities as null. The store writes thousands of evidence maps a tick."""
    fast = dumps(value, _unwritable)
    return json.dumps(value, separators=(",", ":")) if fast is None else fast.decode()
