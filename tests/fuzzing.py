"""Shared hypothesis strategies for the parser fuzz tests (``test_fuzz_*.py``): mutations of real
captures (text by line, JSON by node) and arbitrary JSON-shaped values."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

#: Odd values a field may hold instead of the right one.
NASTY_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        ["", "N/A", "[N/A]", "-1", "0", "nan", "inf", "-inf", "1e400", "9" * 400, "\x00", "é", "[", "]",
         "(", ")", ",", ":", "=", "|", "-", "0-99999999999", "n[0-99999999999]", "2024-13-45T99:99:99Z"]
    ),
)  # fmt: skip

JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        NASTY_TEXT,
    ),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def mutated_lines(draw: st.DrawFn, text: str, max_ops: int = 4) -> str:
    """``text`` with a few line edits: drop, duplicate, swap, replace a word, insert junk, truncate."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, max_ops))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "word", "junk", "cut", "truncate"]))
        if op == "drop":
            del lines[i : i + draw(st.integers(1, 20))]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "word":
            words = lines[i].split(" ")
            k = draw(st.integers(0, len(words) - 1))
            words[k] = draw(NASTY_TEXT)
            lines[i] = " ".join(words)
        elif op == "junk":
            lines.insert(i, draw(NASTY_TEXT))
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            lines = lines[:i]
    return "\n".join(lines)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*at, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*at, i)))
    return out


@st.composite
def mutated_json(draw: st.DrawFn, doc: Any, max_ops: int = 4) -> Any:
    """A deep copy of ``doc`` with a few nodes replaced by arbitrary JSON, dropped or duplicated."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, max_ops))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            doc = draw(JSON)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = draw(st.sampled_from(["replace", "replace", "drop", "dup"]))
        if op == "replace":
            parent[key] = draw(JSON)
        elif op == "drop":
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[f"{key}_"] = copy.deepcopy(parent[key])
    return doc
