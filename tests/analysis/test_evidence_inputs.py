"""Evidence beyond one GPU's window, table-driven: the idle-gap record (what followed past
idle spells, pooled with the class), the fleet's tide per class, memory and CPU in words,
and request metrics as optional evidence. Expected values are worked out by hand in each row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.analysis.engine import AnalysisInput, analyse
from gpusteward.analysis.expr import compile_expr
from gpusteward.analysis.idle_gaps import GapBook, GapOdds, IntArray, wilson_upper
from gpusteward.analysis.rules import RulePack, RuleSpec, compile_rules
from gpusteward.domain.classes import CLASSES
from gpusteward.domain.errors import RuleError
from gpusteward.domain.models import Gpu, Owner, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

NOW = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
H6 = 6 * 3600.0
SERVICE = np.array([CLASSES.index("service")])


def feed(book: GapBook, wid: str, busy_minutes: Sequence[int], minutes: int, *, t0: float = 0.0) -> None:
    """One sample a minute for ``minutes``; busy (>= 1 %) at the listed minutes."""
    busy = set(busy_minutes)
    for k in range(minutes):
        b = 1.0 if k in busy else 0.0
        book.update(t0 + 60.0 * k, [wid], SERVICE, np.array([b]), np.array([b == 0.0]))


def odds(book: GapBook, wid: str, now: float) -> GapOdds:
    return book.odds([wid], SERVICE, now)


def test_wilson_upper_by_hand() -> None:
    # p = 0 over n: z^2 / (n + z^2); z = 1.645, n = 31 -> 2.7055 / 33.7055 = 0.0803.
    assert wilson_upper(np.array([0.0]), np.array([31.0]))[0] == pytest.approx(0.0803, abs=1e-4)
    assert math.isnan(wilson_upper(np.array([0.0]), np.array([0.0]))[0])


# An idle spell of ``gap`` minutes, then 10 busy minutes (a burst); ``reps`` times.
def bursts(gap: int, reps: int) -> tuple[list[int], int]:
    period = gap + 10
    return [d * period + gap + k for d in range(reps) for k in range(10)], reps * period


@pytest.mark.parametrize(
    ("case", "gap_min", "reps", "expect"),
    [
        # Gaps of 60 min: every spell that reached 30 min came back within 6 h.
        ("between bursts: comes back", 60, 12, "high"),
        # Gaps of 8 h: no spell that reached 30 min saw 10 busy samples within 6 h of it.
        ("long quiet spells: does not come back", 480, 12, "low"),
    ],
)
def test_gap_record_learns_what_followed(case: str, gap_min: int, reps: int, expect: str) -> None:
    book = GapBook(H6)
    busy, n = bursts(gap_min, reps)
    feed(book, "w", busy, n)
    # Now 35 min into a fresh spell (the last burst ended the one before).
    feed(book, "w", [], 36, t0=60.0 * n)
    o = odds(book, "w", 60.0 * (n + 35))
    assert o.idle_s[0] == pytest.approx(35 * 60.0)
    if expect == "high":
        assert o.p[0] > 0.8, case
    else:
        assert o.upper[0] < 0.25, case
        assert o.gaps[0] >= 10, case


def test_drizzle_is_not_busy_again() -> None:
    """One busy sample every 45 min breaks every zero run but makes only 8 in 6 h: the
    spell goes on, and its checkpoints resolve 'stayed quiet'."""
    book = GapBook(H6)
    minutes = 20 * 60
    feed(book, "w", list(range(0, minutes, 45)), minutes)
    o = odds(book, "w", 60.0 * (minutes - 1))
    assert o.idle_s[0] >= 19 * 3600  # one spell since the first idle minute
    assert o.p[0] < 0.1
    assert book.busy.sum() == 0


def test_class_prior_and_unknown() -> None:
    book = GapBook(H6, prior_weight=20)
    for i in range(5):  # five service pods whose 60-min gaps always end in a burst
        busy, n = bursts(60, 6)
        feed(book, f"s{i}", busy, n)
    # A new service pod 40 min into its first spell: no gaps of its own, its class speaks.
    feed(book, "new", [], 41)
    o = odds(book, "new", 40 * 60.0)
    assert o.gaps[0] == 20
    assert o.p[0] > 0.9
    # A batch workload with the same spell borrows nothing from the services.
    batch = np.array([CLASSES.index("batch")])
    book.update(0.0, ["b"], batch, np.array([0.0]), np.array([True]))
    book.update(2400.0, ["b"], batch, np.array([0.0]), np.array([True]))
    assert math.isnan(book.odds(["b"], batch, 2400.0).p[0])
    # Busy now (not in a spell) and never seen: unknown.
    feed(book, "busy", list(range(30)), 30)
    assert math.isnan(odds(book, "busy", 29 * 60.0).p[0])
    assert math.isnan(odds(book, "never", 0.0).upper[0])


def test_counts_survive_a_save_but_open_spells_do_not() -> None:
    book = GapBook(H6)
    busy, n = bursts(480, 6)
    feed(book, "w", busy, n)
    again = GapBook(H6)
    again.load(book.to_data())
    assert np.array_equal(again.reached, book.reached[[book.rows["w"]]])
    assert np.isnan(again.spell).all()
    GapBook(3600.0).load(book.to_data())  # another horizon's counts are not this one's


# -- through the engine: fleet tide, requests, the phrases -------------------------------------

Series = Sequence[float | None]


def window(series: Mapping[str, Series], *, requests: Mapping[str, Series] | None = None) -> WindowStore:
    store = WindowStore(window_s=4 * 3600, interval_s=60)
    n = max(len(s) for s in series.values())
    for k in range(n):
        t = NOW - timedelta(minutes=n - 1 - k)
        samples = []
        for u, s in series.items():
            i = k - (n - len(s))
            if i < 0 or s[i] is None:
                continue
            rq = (requests or {}).get(u)
            r = rq[i] if rq is not None and i < len(rq) else None
            samples.append(Sample(u, t, gpu_util_pct=s[i], mem_used_mib=20480.0, requests_per_s=r))
        store.ingest(t, samples, {u: f"pod/{u}" for u in series})
    return store


def run(rules: list[RuleSpec], store: WindowStore, classes: dict[str, str]) -> dict[str, str]:
    """The rules over one workload per GPU; workload id -> message of its finding."""
    gpus = {u: Gpu(u, "n1", 0, "H100", 81920.0) for u in classes}
    workloads = [
        Workload(
            id=f"pod/{u}",
            kind=WorkloadKind.POD,
            name=u,
            owner=Owner(user="ann"),
            gpu_uuids=(u,),
            started_at=NOW - timedelta(days=1),
            gpus_requested=1,
            labels={"gpusteward.io/class": c},
        )
        for u, c in classes.items()
    ]
    res = analyse(compile_rules(RulePack(rules=rules)), AnalysisInput(store.view(NOW), gpus, workloads, NOW))
    return {f.workload_id or "": f.message for f in res.findings}


def rule(when: str) -> RuleSpec:
    return RuleSpec(
        name="r", kind="idle", action="reclaim", when=when, message="{evidence}", min_coverage=0.3
    )


TIDE = rule("zero_for(gpu_util_pct) >= 120 or (zero_for(gpu_util_pct) >= 60 and fleet_idle_share(1h) >= 0.8)")
IDLE70 = [30.0] * 60 + [0.0] * 70
BUSY = [40.0] * 130


@pytest.mark.parametrize(
    ("case", "others_idle", "trips"),
    [
        ("the fleet has gone quiet: 60 min are enough", 4, True),  # 5 of 5 idle for the hour
        ("the fleet is busy: a 70-min gap is between bursts", 1, False),  # 2 of 5
        ("three of four others idle: 80 % is the bar", 3, True),  # 4 of 5 = 0.8
    ],
)
def test_the_fleet_falling_quiet_shortens_the_wait(case: str, others_idle: int, trips: bool) -> None:
    series: dict[str, Series] = {"s0": IDLE70}
    for i in range(1, 5):
        series[f"s{i}"] = [0.0] * 130 if i <= others_idle else BUSY
    got = run([TIDE], window(series), dict.fromkeys(series, "service"))
    assert ("pod/s0" in got) is trips, case
    if trips:
        assert "% of service GPUs idle for the last 1h" in got["pod/s0"]


def test_fleet_tide_is_per_class_and_named_class() -> None:
    series = {"s0": [0.0] * 70, "b0": BUSY, "b1": BUSY}
    classes = {"s0": "service", "b0": "batch", "b1": "batch"}
    store = window(series)
    own = run([rule("fleet_idle_share(1h) == 1")], store, classes)
    assert set(own) == {"pod/s0"}  # the busy batch GPUs are not the service's fleet
    named = run([rule("fleet_idle_share(batch, 0) == 0")], store, classes)
    assert set(named) == set(own) | {"pod/b0", "pod/b1"}
    assert "0 % of batch GPUs idle now" in named["pod/s0"]


REQ_RULE = rule(
    "zero_for(gpu_util_pct) >= 60 and (coverage(requests_per_s, 30m) == 0 or max(requests_per_s, 30m) == 0)"
)


@pytest.mark.parametrize(
    ("case", "requests", "trips"),
    [
        ("requests still flowing: never idle", [0.0] * 100 + [0.2] * 30, False),
        ("one request a minute ago", [0.0] * 129 + [0.05], False),
        ("the metric says zero for 30 min", [1.0] * 90 + [0.0] * 40, True),
        ("no request metric at all: judged by utilisation alone", None, True),
    ],
)
def test_requests_flowing_is_never_idle(case: str, requests: Series | None, trips: bool) -> None:
    series = {"s0": [0.0] * 130}
    store = window(series, requests=None if requests is None else {"s0": requests})
    got = run([REQ_RULE], store, {"s0": "service"})
    assert ("pod/s0" in got) is trips, case


def test_memory_and_cpu_in_words() -> None:
    got = run(
        [rule("zero_for(gpu_util_pct) >= 60 and last(mem_used_mib) > 1024")],
        window({"s0": [0.0] * 70}),
        {"s0": "batch"},
    )
    assert got["pod/s0"] == "at 0 % for 70 min, GPU memory now 20.0 GiB"


def test_gap_functions_without_a_record_are_unknown() -> None:
    """No record kept (a rule preview, a tool): unknown, which never trips, not 0."""
    got = run([rule("p_busy_again_upper(6h) <= 1")], window({"s0": [0.0] * 70}), {"s0": "service"})
    assert got == {}


class _History:
    def __init__(self, book: GapBook) -> None:
        self.book = book

    def odds(self, horizon_s: float, ids: Sequence[str], classes: IntArray, now: datetime) -> GapOdds | None:
        return self.book.odds(ids, classes, now.timestamp()) if horizon_s == self.book.horizon_s else None


def test_p_busy_again_in_a_rule_and_its_words() -> None:
    book = GapBook(H6)
    busy, n = bursts(1440, 12)  # a day's quiet after each burst
    t0 = NOW.timestamp() - 60.0 * (n + 70)
    feed(book, "pod/s0", busy, n + 71, t0=t0)
    store = window({"s0": [0.0] * 70})
    gpus = {"s0": Gpu("s0", "n1", 0, "H100", 81920.0)}
    w = Workload("pod/s0", WorkloadKind.POD, "s0", Owner(user="ann"), 1, ("s0",), NOW - timedelta(days=9))
    rules = compile_rules(RulePack(rules=[rule("p_busy_again_upper(6h) <= 0.2 and idle_gaps(6h) >= 10")]))
    res = analyse(rules, AnalysisInput(store.view(NOW), gpus, [w], NOW, history=_History(book)))
    (f,) = res.findings
    assert f.message.startswith("P(busy again within 6h) <= ")
    assert "(upper 95 % bound, " in f.message
    assert " gaps)" in f.message
    assert set(f.evidence) == {"p_busy_again_upper(6h)", "idle_gaps(6h)"}


@pytest.mark.parametrize(
    "bad",
    [
        "fleet_idle_share(nights, 1h) > 0.5",
        "fleet_idle_share(1h, 2h) > 0.5",
        "p_busy_again(-6h) < 0.1",
        "p_busy_again() < 0.1",
    ],
)
def test_bad_input_calls_are_rule_errors(bad: str) -> None:
    with pytest.raises(RuleError):
        compile_expr(bad)


def test_a_horizon_is_not_a_look_back() -> None:
    assert compile_expr("p_busy_again_upper(24h) < 0.01").window_s == 0.0
    assert compile_expr("fleet_idle_share(1h) > 0.5").window_s == 3600.0
