"""``UsagePending`` (the ledger's per-workload use, numpy columns over the workloads' layout)
gives exactly what the per-workload rules give: a workload with no sample this tick adds
nothing, hours add up, the GPU counts and the advised-idle count keep their largest, the owner
is the newest. Over ticks, days, flushes, workloads that come and go or change owner."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import Owner, Workload, WorkloadKind
from gpusteward.domain.records import UsageAmounts, UsageKey
from gpusteward.runtime.fresh_use import FreshUse
from gpusteward.runtime.usage_pending import UsagePending

T0 = datetime(2026, 3, 1, tzinfo=UTC)
GPUS = [f"GPU-{i}" for i in range(6)]


class Reference:
    """The rules, workload by workload."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], list[Any]] = {}

    def add(
        self,
        day: str,
        hours: float,
        use: Mapping[str, tuple[float, float | None]],
        workloads: list[Workload],
        idle: Mapping[str, int],
    ) -> None:
        for w in workloads:
            utils = [u[0] for u in map(use.get, w.gpu_uuids) if u is not None]
            if not utils:
                continue
            acc = self.pending.setdefault((day, w.id), ["", "", 0, 0, 0.0, 0.0, 0])
            acc[0], acc[1] = w.owner.user, w.owner.team
            acc[2] = max(acc[2], w.gpus_requested)
            acc[3] = max(acc[3], len(w.gpu_uuids))
            acc[4] += len(utils) * hours
            acc[5] += sum(utils) / 100 * hours
            acc[6] = max(acc[6], idle.get(w.id, 0))

    def amounts(self) -> dict[UsageKey, UsageAmounts]:
        return {UsageKey(d, w): UsageAmounts(*acc) for (d, w), acc in self.pending.items()}


def _workload(i: int, gpus: tuple[str, ...], requested: int, user: str) -> Workload:
    return Workload(f"job-{i}", WorkloadKind.POD, f"job-{i}", Owner(user, "nlp"), requested, gpus, T0)


workload_sets = st.lists(
    st.builds(
        _workload,
        st.integers(0, 5),
        st.lists(st.sampled_from(GPUS), max_size=3).map(tuple),
        st.integers(0, 4),
        st.sampled_from(["ana", "bo"]),
    ),
    max_size=5,
).map(lambda ws: list({w.id: w for w in ws}.values()))  # ids are unique, as in the loop's map

ticks = st.lists(
    st.tuples(
        st.sampled_from(["2026-03-01", "2026-03-02"]),
        st.sampled_from([1 / 120, 0.25]),
        st.dictionaries(st.sampled_from(GPUS), st.floats(0, 100).map(lambda u: (u, None))),
        st.booleans(),  # the same workload objects as the tick before (the sources' common case)
        workload_sets,
        st.dictionaries(st.sampled_from([f"job-{i}" for i in range(6)]), st.integers(0, 4)),
        st.booleans(),  # flushed after this tick
        st.booleans(),  # the same GPUs' list as the tick before, other figures (UseReader's case)
    ),
    min_size=1,
    max_size=8,
)


@given(ticks)
@settings(max_examples=300, deadline=None)
def test_usage_pending_is_the_per_workload_rules(tick_list: list[Any]) -> None:
    got, want = UsagePending(), Reference()
    workloads: list[Workload] = []
    last: FreshUse | None = None
    for day, hours, drawn, same, fresh, idle, flush, same_gpus in tick_list:
        if not same:
            workloads = fresh
        use = FreshUse.of(drawn)
        if same_gpus and last is not None:
            use = FreshUse(last.uuids, last.util[::-1] / 2, last.power[::-1])
        last = use
        got.add(day, hours, use, workloads, idle)
        want.add(day, hours, dict(use), workloads, idle)
        assert got.amounts() == want.amounts()
        if flush:
            got.clear()
            want.pending.clear()


def test_a_workload_without_samples_adds_nothing_and_a_flush_starts_afresh() -> None:
    a = _workload(1, ("GPU-0", "GPU-1"), 2, "ana")
    b = _workload(2, ("GPU-2",), 1, "bo")
    p = UsagePending()
    p.add("2026-03-01", 0.5, {"GPU-0": (40.0, None)}, [a, b], {"job-1": 1})
    assert p.amounts() == {UsageKey("2026-03-01", "job-1"): UsageAmounts("ana", "nlp", 2, 2, 0.5, 0.2, 1)}
    p.clear()
    assert p.amounts() == {}
    p.add("2026-03-01", 0.5, {"GPU-2": (100.0, 250.0)}, [a, b], {})
    assert p.amounts() == {UsageKey("2026-03-01", "job-2"): UsageAmounts("bo", "nlp", 1, 1, 0.5, 0.5, 0)}
