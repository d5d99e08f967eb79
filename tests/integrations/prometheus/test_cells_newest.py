"""``cells._last_newest`` against its rule, point by point: per group the newest point; at a tie
one where ``first`` holds, then the last; -1 for a group with none (NaN times are never newest).
Groups of one point each (a tick's scrapes) take a shortcut; this holds both paths."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.integrations.prometheus.cells import _last_newest


def _rule(group: list[int], t: list[float], first: list[bool] | None, n: int) -> list[int]:
    best: list[int] = [-1] * n
    for i, (g, ti) in enumerate(zip(group, t, strict=True)):
        b = best[g]
        if math.isnan(ti) or any(math.isnan(t[j]) for j, gj in enumerate(group) if gj == g):
            continue  # a NaN in a group leaves it without a newest (np.maximum propagates it)
        if b < 0 or ti > t[b] or (ti == t[b] and (first is None or first[i] >= first[b])):
            best[g] = i
    return best


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(
                st.tuples(st.integers(0, n - 1), st.sampled_from([1.0, 2.0, 3.0, math.nan]), st.booleans()),
                max_size=8,
            ),
        )
    ),
    st.booleans(),
)
def test_the_newest_point_of_each_group_is_the_rules(
    drawn: tuple[int, list[tuple[int, float, bool]]], use_first: bool
) -> None:
    n, points = drawn
    group = [g for g, _, _ in points]
    t = [x for _, x, _ in points]
    first = [f for _, _, f in points] if use_first else None
    with np.errstate(invalid="ignore"):  # a NaN time: np.maximum says so
        got = _last_newest(
            np.array(group, dtype=np.intp),
            np.array(t, dtype=np.float64),
            None if first is None else np.array(first, dtype=np.bool_),
            n,
        )
    assert got.tolist() == _rule(group, t, first, n)
