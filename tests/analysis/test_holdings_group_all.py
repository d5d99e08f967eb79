"""``Holdings.group_all``: whether a mask holds on every GPU of each workload. It works on the
fewer side of the mask (the False ones of a gate, the True ones of a trip); here it is held to
the definition, one workload at a time, on both sides and on workloads holding nothing."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpusteward.analysis.holdings import Holdings
from gpusteward.domain.models import Owner, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

AT = datetime(2026, 3, 2, tzinfo=UTC)


def _holdings(sizes: list[int]) -> Holdings:
    gpus = iter(f"G-{i}" for i in range(sum(sizes)))
    ws = [
        Workload(f"w{k}", WorkloadKind.JOB, f"j{k}", Owner("u"), n, tuple(itertools.islice(gpus, n)), AT)
        for k, n in enumerate(sizes)
    ]
    return Holdings(WindowStore(600, 60).view(AT), {}, ws, AT)


@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=40).flatmap(
        lambda sizes: st.tuples(
            st.just(sizes),
            st.lists(st.booleans(), min_size=sum(sizes), max_size=sum(sizes)),
        )
    )
)
def test_group_all_is_true_exactly_where_every_gpu_of_a_workload_is(
    case: tuple[list[int], list[bool]],
) -> None:
    sizes, bits = case
    h = _holdings(sizes)
    mask = np.array(bits, dtype=np.bool_)
    ends = list(itertools.accumulate(sizes))
    expected = [all(bits[end - size : end]) for size, end in zip(sizes, ends, strict=True)]
    assert h.group_all(mask).tolist() == expected
    # The same workloads under the opposite mask: the other side of the fewer-side choice.
    flipped = [all(not b for b in bits[end - size : end]) for size, end in zip(sizes, ends, strict=True)]
    assert h.group_all(~mask).tolist() == flipped
