"""The loop's ledger: waste once per GPU from where it began, savings from stops, GPU use; exact
across restarts and failed writes."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import (
    ActionStatus,
    Decision,
    Finding,
    Gpu,
    Level,
    Observation,
    Owner,
    RuleAction,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.records import DailyKey
from gpusteward.runtime.ledger_recorder import LedgerRecorder, split_days
from gpusteward.runtime.runner import ActionResult
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import LedgerStore

T0 = datetime(2025, 3, 4, 22, 0, tzinfo=UTC)
GPUS = {
    u: Gpu(u, "n", i, "NVIDIA H100", 81559, price_per_hour=3.0)
    for i, u in enumerate(("g0", "g1", "g2", "g3"))
}
ALICE = Workload(
    "job-a", WorkloadKind.JOB, "a", Owner("alice", "vision"), 2, ("g0", "g1"), T0 - timedelta(hours=2)
)
BOB = Workload("job-b", WorkloadKind.JOB, "b", Owner("bob", "nlp"), 4, ("g2", "g3"), T0 - timedelta(hours=2))
WORKLOADS = {w.id: w for w in (ALICE, BOB)}


@pytest.fixture
def state(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s


def finding(
    at: datetime,
    gpus: tuple[str, ...],
    *,
    rule: str = "idle-allocation",
    minutes: float = 30,
    wid: str = "job-a",
    action: RuleAction = RuleAction.RECLAIM,
    kind: str = "idle",
) -> Finding:
    return Finding(rule, kind, action, at, gpus, wid, {}, minutes, minutes / 60 * len(gpus), 0.0)


def stop(w: Workload, at: datetime, level: Level = Level.GRACEFUL_STOP, ok: bool = True) -> ActionResult:
    d = Decision(
        w.id,
        at,
        level,
        "graceful-stop",
        "",
        rule="idle-allocation",
        gpu_uuids=w.gpu_uuids,
        idempotency_key="k",
    )
    return ActionResult(d, ActionStatus.SUCCEEDED if ok else ActionStatus.FAILED, "")


def obs(at: datetime, util: dict[str, float | None], power: float | None = None) -> Observation:
    samples = tuple(Sample(u, at, v, 1000, power) for u, v in util.items())
    return Observation(at, tuple(GPUS.values()), samples, tuple(WORKLOADS.values()))


def totals(state: StateStore, **filters: str) -> dict[str, float]:
    rows = LedgerStore(state).daily(date(2025, 3, 1), date(2025, 3, 9))
    rows = [r for r in rows if all(getattr(r.key, k) == v for k, v in filters.items())]
    names = ("waste_gpu_hours", "waste_cost", "waste_kwh", "saved_gpu_hours", "saved_cost", "stops")
    return {n: sum(getattr(r.amounts, n) for r in rows) for n in names}


def test_split_days() -> None:
    assert split_days(T0, T0 + timedelta(hours=3)) == [("2025-03-04", 2.0), ("2025-03-05", 1.0)]
    assert split_days(T0, T0) == []
    assert split_days(T0, T0 + timedelta(minutes=30)) == [("2025-03-04", 0.5)]  # within a day
    assert split_days(T0, T0 + timedelta(hours=2)) == [("2025-03-04", 2.0)]  # up to its midnight
    assert split_days(T0 + timedelta(hours=1), T0) == []


def test_waste_counts_each_gpu_once_from_where_it_began(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable())
    # Two rules on GPU g0 in one tick; the 30 minutes before detection count once.
    rec.record(
        T0,
        None,
        WORKLOADS,
        [finding(T0, ("g0", "g1")), finding(T0, ("g0",), rule="zombie", kind="zombie")],
        [],
        GPUS,
    )
    assert totals(state)["waste_gpu_hours"] == pytest.approx(1.0)  # 2 GPUs x 30 min
    assert totals(state, kind="zombie")["waste_gpu_hours"] == 0  # sorted: idle-allocation came first
    # The next tick adds only the minute since.
    rec.record(
        T0 + timedelta(minutes=1),
        None,
        WORKLOADS,
        [finding(T0 + timedelta(minutes=1), ("g0", "g1"), minutes=31)],
        [],
        GPUS,
    )
    t = totals(state, user="alice", team="vision")
    assert t["waste_gpu_hours"] == pytest.approx(1.0 + 2 / 60)
    assert t["waste_cost"] == pytest.approx(t["waste_gpu_hours"] * 3.0)


def test_waste_across_midnight_lands_on_both_days(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable())
    at = T0 + timedelta(hours=2, minutes=30)  # 00:30 the next day
    rec.record(at, None, WORKLOADS, [finding(at, ("g0",), minutes=90)], [], GPUS)
    assert totals(state, day="2025-03-04")["waste_gpu_hours"] == pytest.approx(1.0)
    assert totals(state, day="2025-03-05")["waste_gpu_hours"] == pytest.approx(0.5)


def test_a_restarted_recorder_does_not_count_again(state: StateStore) -> None:
    LedgerRecorder(state, PriceTable()).record(T0, None, WORKLOADS, [finding(T0, ("g0",))], [], GPUS)
    later = T0 + timedelta(minutes=5)
    LedgerRecorder(state, PriceTable()).record(
        later, None, WORKLOADS, [finding(later, ("g0",), minutes=35)], [], GPUS
    )
    assert totals(state)["waste_gpu_hours"] == pytest.approx(35 / 60)


def test_electricity_adds_measured_power(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable(electricity_per_kwh=0.5))
    rec.record(T0, obs(T0, {"g0": 0.0}, power=100.0), WORKLOADS, [finding(T0, ("g0",), minutes=60)], [], GPUS)
    t = totals(state)
    assert t["waste_kwh"] == pytest.approx(0.1)
    assert t["waste_cost"] == pytest.approx(3.0 + 0.05)
    plain = LedgerRecorder(state, PriceTable())  # no price per kWh: kWh recorded, not charged
    plain.record(T0 + timedelta(hours=1), obs(T0, {"g1": 0.0}, power=100.0), WORKLOADS,
                 [finding(T0 + timedelta(hours=1), ("g1",), minutes=60)], [], GPUS)  # fmt: skip
    assert totals(state)["waste_cost"] == pytest.approx(6.05)


def test_a_stop_saves_its_gpus_until_the_horizon(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable(savings_horizon_hours=1))
    rec.record(T0, None, WORKLOADS, [], [stop(ALICE, T0), stop(BOB, T0, ok=False)], GPUS)
    assert totals(state)["stops"] == 1
    for m in (30, 50, 90):  # accrues per tick, capped at the horizon
        rec.record(T0 + timedelta(minutes=m), None, WORKLOADS, [], [], GPUS)
    t = totals(state, user="alice")
    assert t["saved_gpu_hours"] == pytest.approx(2.0)  # 2 GPUs x 1 h
    assert t["saved_cost"] == pytest.approx(6.0)
    # A force after the graceful stop frees the same GPUs: no second credit.
    rec.record(T0 + timedelta(minutes=95), None, WORKLOADS, [], [stop(ALICE, T0, Level.FORCE)], GPUS)
    assert totals(state)["stops"] == 1
    assert totals(state)["saved_gpu_hours"] == pytest.approx(2.0)


def test_a_stop_finished_after_its_workload_left_is_credited_from_the_snapshot(state: StateStore) -> None:
    """A two-phase stop succeeds at its follow-up, when the job that ended on its checkpoint
    signal is no longer in the source: the stored snapshot names its owner and GPUs."""
    state.remember_workloads([ALICE], T0 - timedelta(minutes=5))
    rec = LedgerRecorder(state, PriceTable(savings_horizon_hours=1))
    rec.record(T0, None, {}, [], [stop(ALICE, T0), stop(BOB, T0)], GPUS)  # neither is running now
    assert totals(state)["stops"] == 1  # bob was never seen: nothing to credit
    rec.record(T0 + timedelta(hours=1), None, {}, [], [], GPUS)
    t = totals(state, user="alice", team="vision")
    assert t["saved_gpu_hours"] == pytest.approx(2.0)
    assert t["saved_cost"] == pytest.approx(6.0)


def test_savings_end_decides_and_flush_until_finishes(state: StateStore) -> None:
    ends = {"job-a": T0 + timedelta(hours=3), "job-b": None}
    rec = LedgerRecorder(state, PriceTable(), flush_every_s=3600, savings_end=lambda w, at: ends[w.id])
    rec.record(T0, None, WORKLOADS, [], [stop(ALICE, T0), stop(BOB, T0)], GPUS)
    rec.record(T0 + timedelta(minutes=10), None, WORKLOADS, [], [], GPUS)  # not flushed yet
    assert totals(state)["stops"] == 2  # the first record flushes
    assert totals(state)["saved_gpu_hours"] == 0
    rec.flush(until=T0 + timedelta(hours=5))
    assert totals(state, user="alice")["saved_gpu_hours"] == pytest.approx(6.0)  # to its end, not beyond
    assert totals(state, user="bob")["saved_gpu_hours"] == 0  # None: nothing saved (a false kill)
    assert totals(state, day="2025-03-05")["saved_gpu_hours"] == pytest.approx(2.0)


def test_use_counts_held_and_busy_hours_of_samples_it_had(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable())
    rec.record(T0, obs(T0, {"g0": 100.0, "g1": 0.0}), WORKLOADS, [], [], GPUS)  # first tick: no interval yet
    t1 = T0 + timedelta(minutes=12)
    advice = finding(
        t1, ("g3",), rule="overprovisioned", wid="job-b", action=RuleAction.ADVISE, kind="overprovisioned"
    )
    rec.record(t1, obs(t1, {"g0": 100.0, "g1": 0.0, "g2": 50.0, "g3": None}), WORKLOADS, [advice], [], GPUS)
    rows = {
        r.key.workload_id: r.amounts for r in LedgerStore(state).usage(date(2025, 3, 4), date(2025, 3, 5))
    }
    a, b = rows["job-a"], rows["job-b"]
    assert (a.held_gpu_hours, a.busy_gpu_hours) == (pytest.approx(0.4), pytest.approx(0.2))
    # g3 had no value
    assert (b.held_gpu_hours, b.busy_gpu_hours) == (pytest.approx(0.2), pytest.approx(0.1))
    assert (b.gpus_requested, b.gpus_held, b.advise_idle_gpus) == (4, 2, 1)
    assert (b.user, b.team) == ("bob", "nlp")
    # A long outage counts at most max_gap_s (15 min) as use.
    t2 = t1 + timedelta(hours=5)
    rec.record(t2, obs(t2, {"g0": 100.0}), WORKLOADS, [], [], GPUS)
    rows = {
        r.key.workload_id: r.amounts for r in LedgerStore(state).usage(date(2025, 3, 5), date(2025, 3, 6))
    }
    assert rows["job-a"].held_gpu_hours == pytest.approx(0.25)


def test_a_failed_write_keeps_the_amounts_for_the_next(
    state: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = LedgerRecorder(state, PriceTable())
    real_add = LedgerStore.add
    calls = {"n": 0}

    def flaky(self: LedgerStore, *args: object, **kw: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreError("database is locked")
        real_add(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(LedgerStore, "add", flaky)
    with pytest.raises(StoreError):
        rec.record(T0, None, WORKLOADS, [finding(T0, ("g0",))], [], GPUS)
    assert totals(state)["waste_gpu_hours"] == 0
    later = T0 + timedelta(minutes=1)
    rec.record(later, None, WORKLOADS, [finding(later, ("g0",), minutes=31)], [], GPUS)
    assert totals(state)["waste_gpu_hours"] == pytest.approx(31 / 60)


def _plain_waste(
    rec: LedgerRecorder, findings: list[Finding], power: dict[str, float]
) -> dict[DailyKey, list[float]]:
    """The waste the recorder counts, GPU by GPU and day by day: the reference for its grouping."""
    out: dict[DailyKey, list[float]] = {}
    until = dict(rec._waste_until)
    for f in sorted(
        findings, key=lambda f: (f.action is not RuleAction.RECLAIM, f.rule, f.workload_id or "")
    ):
        owner = WORKLOADS[f.workload_id or ""].owner
        began = f.at - timedelta(minutes=max(0.0, f.wasted_minutes))
        for uuid in f.gpu_uuids:
            prev = until.get(uuid)
            start = began if prev is None or prev < began else prev
            if f.at <= start:
                continue
            price, watts = GPUS[uuid].price_per_hour, power.get(uuid)
            for day, hours in split_days(start, f.at):
                kwh = watts / 1000 * hours if watts is not None else 0.0
                acc = out.setdefault(DailyKey(day, "USD", owner.user, owner.team, f.kind), [0.0] * 3)
                acc[0] += hours
                acc[1] += hours * price + 0.5 * kwh
                acc[2] += kwh
            until[uuid] = f.at
    return out


def test_waste_counted_per_start_matches_the_gpu_by_gpu_count(state: StateStore) -> None:
    """A finding's GPUs counted from different times (one counted to the last tick, one new, one
    long unseen), across midnight, with and without power: the same amounts as GPU by GPU."""
    rng = random.Random(7)
    rec = LedgerRecorder(state, PriceTable(electricity_per_kwh=0.5), flush_every_s=10**6)
    rec._load()
    at = T0 + timedelta(hours=1, minutes=50)  # 23:50
    for _ in range(12):
        at += timedelta(minutes=rng.choice((1, 2, 7)))
        power = {u: rng.uniform(50, 700) for u in GPUS if rng.random() < 0.7}
        findings = [
            finding(
                at,
                tuple(u for u in ("g0", "g1") if rng.random() < 0.8) or ("g0",),
                minutes=rng.uniform(0, 40),
            ),
            finding(at, ("g2", "g3"), wid="job-b", rule="zombie", kind="zombie", minutes=rng.uniform(0, 40)),
            finding(
                at, ("g3",), wid="job-b", action=RuleAction.ADVISE, kind="advice", rule="big", minutes=90
            ),
        ]
        expected = _plain_waste(rec, findings, power)
        rec._daily, rec._daily_by = {}, {}  # what this tick counts alone
        rec._waste(findings, WORKLOADS, GPUS, power)
        got = {key: acc[:3] for key, acc in rec._daily.items()}
        assert set(got) == set(expected)
        for key, acc in expected.items():
            assert got[key] == pytest.approx(acc, rel=1e-12)
    assert {key.day for key in got} == {"2025-03-05"}  # past midnight by now
