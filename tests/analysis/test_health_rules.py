"""GPU health: the trend aggregates against hand-computed values, and the default pack's
health rules (gpu-failed, gpu-degrading, gpu-throttled) over synthetic windows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.analysis.aggregates import Aggregate, EvalContext
from gpusteward.analysis.engine import AnalysisInput, analyse
from gpusteward.analysis.rules import compile_rules, default_rule_pack
from gpusteward.domain.models import Gpu, Metric, Owner, RuleAction, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
RULES = compile_rules(default_rule_pack(), window_s=4 * 3600)
HEALTH = [r for r in RULES if r.action is RuleAction.REPAIR]

Series = Mapping[Metric, Sequence[float | None]]


def _store(
    series: Mapping[str, Series], minutes: int, holders: Mapping[str, str] | None = None
) -> WindowStore:
    """A 4 h window at one minute; ``series[uuid][metric][i]`` is minute i's value (None: not read)."""
    store = WindowStore(window_s=4 * 3600, interval_s=60)
    store.register(series)
    for i in range(minutes):
        at = T0 + timedelta(minutes=i)
        samples = [
            Sample(u, at, **{m.value: vals[i] for m, vals in per.items() if i < len(vals)})
            for u, per in series.items()
        ]
        store.ingest(at, samples, {u: (holders or {}).get(u, "") for u in series})
    return store


def _values(store: WindowStore, now: datetime, agg: Aggregate) -> list[float]:
    view = store.view(now)
    idx = view.indices_of(view.uuids)
    ctx = EvalContext(view, idx, np.arange(idx.size), np.ones(idx.size), {})
    return ctx.aggregate(agg).tolist()


# --- the trend aggregates -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # 1 → 3 (+2), 3 → 3 (0), 3 → 2 is a reset (+2: the new count), 2 → 5 (+3), gap, 5 → 6 (+1).
        ([1, 3, 3, 2, 5, None, 6], 8.0),
        ([4, 4, 4, 4], 0.0),
        ([None, None, 7], math.nan),  # one reading says nothing about growth
        ([None, None, None], math.nan),
    ],
)
def test_increase_counts_growth_and_resets(values: list[float | None], expected: float) -> None:
    store = _store({"g": {Metric.ECC_SBE: values}}, len(values))
    now = T0 + timedelta(minutes=len(values) - 1)
    got = _values(store, now, Aggregate("increase", Metric.ECC_SBE, (3600.0,)))[0]
    assert got == pytest.approx(expected, nan_ok=True)


def test_increase_only_looks_back_its_duration() -> None:
    # Minutes 0..9: +1 a minute. Over the last 5 min (slots 5..9) the growth is 4.
    store = _store({"g": {Metric.PCIE_REPLAY: list(range(10))}}, 10)
    now = T0 + timedelta(minutes=9)
    assert _values(store, now, Aggregate("increase", Metric.PCIE_REPLAY, (300.0,))) == [4.0]


def test_slope_is_per_hour_and_skips_gaps() -> None:
    # 40, 41, (gap), 43, 44 °C at minutes 0, 1, 3, 4: exactly 1 °C a minute = 60 °C/h.
    temp: list[float | None] = [40, 41, None, 43, 44]
    # Hand-computed least squares on (0,40),(1,41),(3,43),(4,44): slope 1 per minute.
    store = _store({"g": {Metric.TEMP: temp}}, 5)
    now = T0 + timedelta(minutes=4)
    assert _values(store, now, Aggregate("slope", Metric.TEMP, (600.0,))) == [pytest.approx(60.0)]
    # Noisy: (0,1),(1,3),(2,2): slope = (n*sty - st*sy)/(n*stt - st^2) = (3*7 - 3*6)/(3*5 - 9) = 0.5/min.
    store = _store({"g": {Metric.TEMP: [1, 3, 2]}}, 3)
    got = _values(store, T0 + timedelta(minutes=2), Aggregate("slope", Metric.TEMP, (600.0,)))
    assert got == [pytest.approx(30.0)]


# --- the rules ------------------------------------------------------------------------------


def _gpu(u: str, node: str = "node3", index: int = 1) -> Gpu:
    return Gpu(u, node, index, "H100", 80 * 1024, price_per_hour=3.0)


def _job(wid: str, *uuids: str) -> Workload:
    return Workload(wid, WorkloadKind.JOB, wid, Owner("alice"), len(uuids), uuids, T0 - timedelta(hours=9))


def _idle(n: int, **health: Sequence[float | None]) -> Series:
    out: dict[Metric, Sequence[float | None]] = {Metric.GPU_UTIL: [0.0] * n, Metric.MEM_USED: [2048.0] * n}
    out.update({Metric(k): v for k, v in health.items()})
    return out


def _run(
    series: Mapping[str, Series], minutes: int, workloads: Sequence[Workload], gpus: Mapping[str, Gpu]
) -> list[tuple[str, str, str | None, str]]:
    holders = {u: w.id for w in workloads for u in w.gpu_uuids}
    store = _store(series, minutes, holders)
    now = T0 + timedelta(minutes=minutes - 1)
    res = analyse(HEALTH, AnalysisInput(store.view(now), gpus, workloads, now))
    return [(f.rule, f.gpu_uuids[0], f.workload_id, f.message) for f in res.findings]


N = 40
CASES = [
    # (name, per-GPU health series, held by a job?, expected rules)
    (
        "xid 79 on a held idle GPU",
        {"xid_code": [0] * 30 + [79] + [0] * 9, "xid_fatal": [0] * 30 + [1] + [0] * 9},
        True,
        ["gpu-failed"],
    ),
    (
        "xid 79 on a free GPU",
        {"xid_code": [0] * 30 + [79] + [0] * 9, "xid_fatal": [0] * 30 + [1] + [0] * 9},
        False,
        ["gpu-failed"],
    ),
    (
        "an Xid of the job's own (13) is no failure",
        {"xid_code": [0] * 30 + [13] + [0] * 9, "xid_fatal": [0] * N},
        True,
        [],
    ),
    ("double-bit ECC", {"ecc_dbe_count": [0] * 20 + [2] * 20}, True, ["gpu-failed"]),
    ("row remap failure", {"row_remap_failure": [0] * 39 + [1]}, True, ["gpu-failed"]),
    (
        "healthy counters",
        {"ecc_dbe_count": [0] * N, "ecc_sbe_count": [5] * N, "throttled": [0] * N},
        True,
        [],
    ),
    ("no health data at all", {}, True, []),
    ("health data went missing", {"xid_fatal": [None] * N, "ecc_dbe_count": [None] * N}, True, []),
    ("throttled most of 30 min", {"throttled": [0] * 5 + [1] * 35}, True, ["gpu-throttled"]),
    ("throttled a third of 30 min", {"throttled": [0] * 30 + [1] * 10}, True, []),
    ("retired pages rising", {"retired_pages": [2] * 30 + [3] * 10}, True, ["gpu-degrading"]),
]


@pytest.mark.parametrize(("name", "health", "held", "expected"), CASES, ids=[c[0] for c in CASES])
def test_health_rules(
    name: str, health: Mapping[str, Sequence[float]], held: bool, expected: list[str]
) -> None:
    workloads = [_job("job-1", "GPU-a")] if held else []
    found = _run({"GPU-a": _idle(N, **health)}, N, workloads, {"GPU-a": _gpu("GPU-a")})
    assert [f[0] for f in found] == expected
    for rule, uuid, wid, _ in found:
        assert uuid == "GPU-a"
        assert wid == ("job-1" if held else None), rule


def test_failed_message_names_the_xid_and_the_evidence() -> None:
    health = {"xid_code": [0] * 30 + [79] + [0] * 9, "xid_fatal": [0] * 30 + [1] + [0] * 9}
    (found,) = _run({"GPU-a": _idle(N, **health)}, N, [_job("job-1", "GPU-a")], {"GPU-a": _gpu("GPU-a")})
    assert found[3].startswith("node3/gpu1: Xid 79 (GPU has fallen off the bus); fatal Xid max 1 over 30m")


def test_a_gpu_shared_by_two_workloads_is_judged_for_each_and_free_ones_once() -> None:
    dbe = {"ecc_dbe_count": [1] * N}
    series = {"GPU-a": _idle(N, **dbe), "GPU-b": _idle(N, **dbe), "GPU-c": _idle(N)}
    gpus = {u: _gpu(u, index=i) for i, u in enumerate(series)}
    found = _run(series, N, [_job("job-1", "GPU-a"), _job("job-2", "GPU-a")], gpus)
    assert sorted((f[1], f[2] or "-") for f in found) == [
        ("GPU-a", "job-1"),
        ("GPU-a", "job-2"),
        ("GPU-b", "-"),
    ]


def _failing_gpu(minutes: int, fails_at: int) -> Series:
    """Corrected ECC errors that come faster and faster (one every 20 min, then every few
    minutes), then the GPU falls off the bus (Xid 79) at ``fails_at``."""
    sbe, count = [], 0.0
    for i in range(minutes):
        every = 20 if i < fails_at - 90 else 3
        count += 1 if i % every == 0 else 0
        sbe.append(count)
    xid = [79.0 if i == fails_at else 0.0 for i in range(minutes)]
    return _idle(minutes, ecc_sbe_count=sbe, xid_code=xid, xid_fatal=[1.0 if x else 0.0 for x in xid])


def test_a_degrading_gpu_is_found_before_it_fails() -> None:
    minutes, fails_at = 200, 180
    series = {"GPU-a": _failing_gpu(minutes, fails_at)}
    holders = {"GPU-a": "job-1"}
    store = _store(series, minutes, holders)
    first: dict[str, int] = {}
    for i in range(10, minutes, 5):
        now = T0 + timedelta(minutes=i)
        res = analyse(
            HEALTH, AnalysisInput(store.view(now), {"GPU-a": _gpu("GPU-a")}, [_job("job-1", "GPU-a")], now)
        )
        for f in res.findings:
            first.setdefault(f.rule, i)
    assert first["gpu-failed"] == fails_at
    assert first["gpu-degrading"] < fails_at  # a prediction, with lead time
    # Not before the errors sped up: one corrected error every 20 min is no trend.
    assert first["gpu-degrading"] > fails_at - 90


def test_throttling_that_grows_over_two_hours_is_degrading() -> None:
    # 2 h watched: slowed one minute in five for 90 min, then every other minute: 33 of 120
    # minutes (>= 0.2), 15 of the last 30 (more often lately, but not most of the time).
    n = 120
    throttled = [1.0 if i % 5 == 0 else 0.0 for i in range(90)] + [float(i % 2) for i in range(30)]
    found = _run(
        {"GPU-a": _idle(n, throttled=throttled)}, n, [_job("job-1", "GPU-a")], {"GPU-a": _gpu("GPU-a")}
    )
    assert [f[0] for f in found] == ["gpu-degrading"]  # half of the last 30 min: not yet throttled
