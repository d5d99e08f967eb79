"""The holdings' layout memo: the same uuids and groups as flattening the workloads afresh,
built again whenever any workload object, their number or their order differs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from gpusteward.analysis.holdings import Layout, LayoutMemo
from gpusteward.domain.models import Owner, Workload, WorkloadKind

AT = datetime(2026, 3, 2, tzinfo=UTC)


def fleet() -> list[Workload]:
    sizes = [1, 2, 0, 4, 1]  # one workload holds nothing (a pending pod)
    gpus = iter(f"G-{i}" for i in range(sum(sizes)))
    return [
        Workload(f"w{k}", WorkloadKind.POD, f"p{k}", Owner("u"), n, tuple(itertools.islice(gpus, n)), AT)
        for k, n in enumerate(sizes)
    ]


def check(layout: Layout, ws: list[Workload]) -> None:
    assert layout.workloads == ws
    assert layout.uuids == [u for w in ws for u in w.gpu_uuids]
    assert layout.group.tolist() == [k for k, w in enumerate(ws) for _ in w.gpu_uuids]
    assert layout.group_size.tolist() == [float(len(w.gpu_uuids)) for w in ws]


def test_the_same_workload_objects_get_the_same_layout() -> None:
    memo, ws = LayoutMemo(), fleet()
    first = memo.of(ws)
    check(first, ws)
    assert memo.of(list(ws)) is first  # another list of the same objects, as each tick hands over
    assert memo.built == 1
    with pytest.raises(ValueError, match="read-only"):  # shared between ticks: nobody may write into it
        first.group[0] = 3


@pytest.mark.parametrize(
    "change",
    [
        lambda ws: [*ws[:1], replace(ws[1], gpu_uuids=("G-9", "G-1")), *ws[2:]],  # a new object
        lambda ws: ws[::-1],  # another order
        lambda ws: ws[:-1],  # one gone
        lambda ws: [*ws, replace(ws[0], id="w9", gpu_uuids=("G-8",))],  # one more
    ],
)
def test_any_other_workloads_are_laid_out_afresh(change: Callable[[list[Workload]], list[Workload]]) -> None:
    memo, ws = LayoutMemo(), fleet()
    memo.of(ws)
    other = change(ws)
    layout = memo.of(other)
    assert memo.built == 2
    check(layout, other)
    assert np.array_equal(memo.of(other).group, layout.group)
    assert memo.built == 2
