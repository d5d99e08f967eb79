"""Showback figures add up: a month of ticks through the ledger recorder, then each team's spend
recomputed from the raw samples the plain way (a loop over samples x price) and compared to the
ledger to the cent, on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.cloud import Instance, Lifecycle
from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import (
    Finding,
    Gpu,
    Observation,
    Owner,
    RuleAction,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.records import ShowbackKey
from gpusteward.runtime.ledger_recorder import LedgerRecorder
from gpusteward.store.db import StateStore
from gpusteward.store.memory import MemoryStore

START = datetime(2026, 11, 1, tzinfo=UTC)
END = datetime(2026, 12, 1, tzinfo=UTC)
TEAMS = (Owner("alice", "vision"), Owner("bob", "nlp"), Owner("carol", "nlp"), Owner("dan", "speech"))
GPUS = {
    f"g{i}": Gpu(f"g{i}", f"n{i // 2}", i % 2, model, 81559)
    for i, model in enumerate(
        (
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA L4",
            "Tesla T4",
        )
    )
}
PRICES = PriceTable(rate="reserved", electricity_per_kwh=0.17, per_model={"l4": 0.81})


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    url = f"sqlite:///{tmp_path / 's.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = StateStore(url)
    s.create_schema()
    yield s
    s.close()


def ticks(seed: int) -> Iterator[tuple[datetime, Observation]]:
    """Every 10 minutes with jitter, some ticks missed (gaps over the recorder's 900 s cap),
    GPUs changing hands every few hours, some GPUs held by nobody, samples missing or stale."""
    rng = random.Random(seed)
    at, holders = START + timedelta(minutes=3), {}
    while at < END:
        if rng.random() < 0.05:  # reassign: a new workload on a random subset of GPUs
            n = 0
            holders = {}
            for uuid in GPUS:
                if rng.random() < 0.7:
                    holders.setdefault(rng.choice(TEAMS), []).append(uuid)
                    n += 1
        workloads = tuple(
            Workload(f"w-{o.user}-{int(at.timestamp())}", WorkloadKind.JOB, "j", o, len(g), tuple(g), at)
            for o, g in holders.items()
        )
        samples = []
        for uuid in GPUS:
            roll = rng.random()
            if roll < 0.05:
                continue  # the source had nothing for this GPU
            when = at - timedelta(hours=2) if roll < 0.08 else at  # stale: not new since last tick
            util = None if roll < 0.1 else rng.uniform(0, 100)
            power = None if rng.random() < 0.2 else rng.uniform(60, 700)
            samples.append(Sample(uuid, when, util, 1000.0, power))
        yield at, Observation(at, tuple(GPUS.values()), tuple(samples), workloads)
        at += timedelta(seconds=rng.choice((600, 600, 600, 590, 615, 1800)))


def test_a_months_spend_per_team_is_the_samples_times_their_price(state: StateStore) -> None:
    rec = LedgerRecorder(state, PRICES, flush_every_s=3600)
    expected_spend: dict[str, float] = defaultdict(float)
    expected_power: dict[str, float] = defaultdict(float)
    expected_held: dict[str, float] = defaultdict(float)
    prev: datetime | None = None
    for at, obs in ticks(seed=19):
        rec.record(at, obs, {w.id: w for w in obs.workloads}, [], [], GPUS)
        # The plain way: every fresh utilisation sample is its GPU held for the time since the
        # last tick (at most 15 minutes), at the reserved price of its model.
        if prev is not None:
            hours = min((at - prev).total_seconds(), 900) / 3600
            team_of = {u: w.owner.team for w in obs.workloads for u in w.gpu_uuids}
            for s in obs.samples:
                if s.gpu_util_pct is None or s.at <= prev:
                    continue
                team = team_of.get(s.gpu_uuid, "")
                expected_spend[team] += hours * PRICES.price(GPUS[s.gpu_uuid].model, "reserved")
                expected_held[team] += hours
                if s.power_w is not None:
                    expected_power[team] += s.power_w / 1000 * hours * 0.17
        prev = at
    rec.flush(prev)

    rows = state.ledger.showback(date(2026, 11, 1), date(2026, 12, 1))
    got_spend: dict[str, float] = defaultdict(float)
    got_power: dict[str, float] = defaultdict(float)
    got_held: dict[str, float] = defaultdict(float)
    for r in rows:
        assert (r.key.rate, r.key.currency) == ("reserved", "USD")
        got_spend[r.key.team] += r.amounts.spend
        got_power[r.key.team] += r.amounts.power_cost
        got_held[r.key.team] += r.amounts.held_gpu_hours
        assert 0 <= r.amounts.used_gpu_hours <= r.amounts.held_gpu_hours + 1e-9
    assert set(got_spend) == {"vision", "nlp", "speech", ""}
    assert {t: round(v, 2) for t, v in got_spend.items()} == {
        t: round(v, 2) for t, v in expected_spend.items()
    }
    assert {t: round(v, 2) for t, v in got_power.items()} == {
        t: round(v, 2) for t, v in expected_power.items()
    }
    assert {t: round(v, 6) for t, v in got_held.items()} == {t: round(v, 6) for t, v in expected_held.items()}
    # Each GPU model priced on its own row: the L4 at the configured on-demand price less 35 %.
    l4 = [r for r in rows if r.key.gpu_model == "NVIDIA L4"]
    assert l4
    assert all(abs(r.amounts.spend - r.amounts.held_gpu_hours * 0.81 * 0.65) < 1e-6 for r in l4)


def test_waste_and_reclaimed_hours_land_on_the_model_and_owner(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable())
    w = Workload("j", WorkloadKind.JOB, "j", Owner("alice", "vision"), 2, ("g0", "g4"), START)
    at = START + timedelta(hours=5)
    f = Finding("idle", "idle", RuleAction.RECLAIM, at, ("g0", "g4"), "j", {}, 60, 2.0, 0.0)
    rec.record(at, None, {"j": w}, [f], [], GPUS)
    rec.flush(at)
    rows = {r.key: r.amounts for r in state.ledger.showback(date(2026, 11, 1), date(2026, 11, 2))}
    h100 = ShowbackKey("2026-11-01", "vision", "alice", "NVIDIA H100 80GB HBM3", "on-demand", "USD")
    l4 = ShowbackKey("2026-11-01", "vision", "alice", "NVIDIA L4", "on-demand", "USD")
    assert rows[h100].wasted_gpu_hours == pytest.approx(1.0)
    assert rows[l4].wasted_gpu_hours == pytest.approx(1.0)
    assert rows[h100].held_gpu_hours == 0.0  # no samples: nothing counted as held


def test_amounts_for_a_closed_month_go_to_the_day_they_arrive(state: StateStore) -> None:
    rec = LedgerRecorder(state, PriceTable(), flush_every_s=3600)
    w = Workload("j", WorkloadKind.JOB, "j", Owner("alice", "vision"), 1, ("g0",), START)

    def tick(at: datetime) -> None:
        rec.record(at, Observation(at, (), (Sample("g0", at, 50.0),), (w,)), {"j": w}, [], [], GPUS)

    tick(datetime(2026, 11, 30, 23, 50, tzinfo=UTC))
    tick(datetime(2026, 11, 30, 23, 56, tzinfo=UTC))  # 6 minutes of Nov 30, pending (flush hourly)
    assert state.ledger.close_month("2026-11", datetime(2026, 12, 1, tzinfo=UTC)) is True
    tick(datetime(2026, 12, 1, 0, 2, tzinfo=UTC))  # a new day: flushes both ticks' amounts
    assert state.ledger.showback(date(2026, 11, 1), date(2026, 12, 1)) == []
    [late] = state.ledger.showback(date(2026, 12, 1), date(2027, 1, 1))
    assert late.key.day == "2026-12-01"
    assert late.amounts.held_gpu_hours == pytest.approx(12 / 60)
    assert late.amounts.used_gpu_hours == pytest.approx(6 / 60)


def test_a_gpu_sampled_three_times_in_a_tick_is_held_once_at_its_mean(state: StateStore) -> None:
    # Prometheus scrapes every 10 s and the tick runs every 30 s: three samples of each GPU.
    rec = LedgerRecorder(state, PriceTable(electricity_per_kwh=0.2), flush_every_s=3600)
    w = Workload("j", WorkloadKind.JOB, "j", Owner("alice", "vision"), 1, ("g0",), START)
    t0, t1 = START + timedelta(hours=1), START + timedelta(hours=1, seconds=30)
    rec.record(t0, Observation(t0, (), (Sample("g0", t0, 50.0),), (w,)), {"j": w}, [], [], GPUS)
    scrapes = tuple(
        Sample("g0", t0 + timedelta(seconds=s), util, 1000.0, power)
        for s, util, power in ((10, 90.0, 600.0), (20, 30.0, None), (30, 120.0, 300.0))
    )
    rec.record(t1, Observation(t1, (), scrapes, (w,)), {"j": w}, [], [], GPUS)
    rec.flush(t1)
    [row] = state.ledger.showback(date(2026, 11, 1), date(2026, 11, 2))
    hours = 30 / 3600
    assert row.amounts.held_gpu_hours == pytest.approx(hours)  # not three times the half-minute
    assert row.amounts.used_gpu_hours == pytest.approx((90 + 30 + 100) / 3 / 100 * hours)  # 120 % is 100
    assert row.amounts.kwh == pytest.approx((600 + 300) / 2 / 1000 * hours)  # the two readings it had
    [use] = state.ledger.usage(date(2026, 11, 1), date(2026, 11, 2))
    assert (use.amounts.held_gpu_hours, use.amounts.busy_gpu_hours) == (
        pytest.approx(hours),
        pytest.approx((90 + 30 + 100) / 3 / 100 * hours),
    )


def test_a_month_that_has_not_ended_cannot_be_closed(state: StateStore) -> None:
    with pytest.raises(ValueError, match="2026-11 has not ended"):
        state.ledger.close_month("2026-11", datetime(2026, 11, 30, 23, 59, tzinfo=UTC))
    with pytest.raises(ValueError, match="YYYY-MM"):
        state.ledger.close_month("2026-13", datetime(2027, 1, 1, tzinfo=UTC))


class Instances:
    """The cloud's instances behind the nodes (the ``InstanceControl`` read the recorder makes):
    n1 on spot, n2 on-demand (under a reserved configured rate), n0 on no known instance; the
    cloud cannot be read every seventh time."""

    name = "test-cloud"

    def __init__(self) -> None:
        self.reads = 0
        self.by_node = {
            node: Instance(f"i-{node}", node, "p5.48xlarge", life, "running", START, 2)
            for node, life in (("n1", Lifecycle.SPOT), ("n2", Lifecycle.ON_DEMAND))
        }

    def instances(self) -> dict[str, Instance]:
        self.reads += 1
        if self.reads % 7 == 0:
            raise SourceError("ec2: connection refused")
        return dict(self.by_node)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore | MemoryStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    url = f"sqlite:///{tmp_path / 's.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = StateStore(url)
    s.create_schema()
    yield s
    s.close()


def test_each_gpu_is_priced_at_its_nodes_instance_rate_to_the_cent(
    any_store: StateStore | MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    cloud = Instances()
    rec = LedgerRecorder(any_store, PRICES, flush_every_s=3600, instances=cloud)
    node_rate = {"n0": "reserved", "n1": "spot", "n2": "on-demand"}
    expected: dict[tuple[str, str], float] = defaultdict(float)
    prev: datetime | None = None
    ticks_seen = 0
    with caplog.at_level(logging.INFO, logger="gpusteward.runtime.showback_recorder"):
        for at, obs in ticks(seed=18):
            rec.record(at, obs, {w.id: w for w in obs.workloads}, [], [], GPUS)
            ticks_seen += 1
            if prev is not None:
                hours = min((at - prev).total_seconds(), 900) / 3600
                team_of = {u: w.owner.team for w in obs.workloads for u in w.gpu_uuids}
                for s in obs.samples:
                    if s.gpu_util_pct is None or s.at <= prev:
                        continue
                    gpu = GPUS[s.gpu_uuid]
                    rate = node_rate[gpu.node]
                    expected[(team_of.get(s.gpu_uuid, ""), rate)] += hours * PRICES.price(gpu.model, rate)  # type: ignore[arg-type]
            prev = at
    rec.flush(prev)
    assert cloud.reads == ticks_seen  # once a tick
    got: dict[tuple[str, str], float] = defaultdict(float)
    for r in any_store.ledger.showback(date(2026, 11, 1), date(2026, 12, 1)):
        assert r.key.rate == node_rate[{g.model: g.node for g in GPUS.values()}[r.key.gpu_model]]
        got[(r.key.team, r.key.rate)] += r.amounts.spend
    assert {k: round(v, 2) for k, v in got.items()} == {k: round(v, 2) for k, v in expected.items()}
    assert {rate for _, rate in got} == {"spot", "on-demand", "reserved"}
    # The failed reads kept the last known rates, and said so once per outage.
    failures = [r for r in caplog.records if "cannot read the instances" in r.getMessage()]
    assert len(failures) == cloud.reads // 7


def test_a_cloud_never_read_leaves_the_configured_rate(tmp_path: Path) -> None:
    cloud = Instances()
    cloud.reads = 6  # the first read fails: no rate known yet
    store = MemoryStore()
    rec = LedgerRecorder(store, PRICES, instances=cloud)
    w = Workload("j", WorkloadKind.JOB, "j", Owner("alice", "vision"), 1, ("g2",), START)
    for minutes in (0, 10):
        at = START + timedelta(minutes=minutes)
        rec.record(at, Observation(at, (), (Sample("g2", at, 50.0),), (w,)), {"j": w}, [], [], GPUS)
    # Tick 1 failed (configured reserved rate; no hours yet), tick 2 read n1 as spot.
    [row] = store.ledger.showback(date(2026, 11, 1), date(2026, 11, 2))
    assert row.key.rate == "spot"
    assert row.amounts.spend == pytest.approx(10 / 60 * PRICES.price("NVIDIA A100-SXM4-80GB", "spot"))


def test_an_outage_of_the_cloud_is_logged_once_and_keeps_the_last_rates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cloud = Instances()
    store = MemoryStore()
    rec = LedgerRecorder(store, PRICES, instances=cloud)
    w = Workload("j", WorkloadKind.JOB, "j", Owner("alice", "vision"), 1, ("g2",), START)
    down = {1, 2, 3}

    def read() -> dict[str, Instance]:
        cloud.reads += 1
        if cloud.reads - 1 in down:
            raise SourceError("ec2: connection refused")
        return dict(cloud.by_node)

    cloud.instances = read  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="gpusteward.runtime.showback_recorder"):
        for minutes in range(0, 50, 10):  # read 0 works, 1-3 fail, 4 works again
            at = START + timedelta(minutes=minutes)
            rec.record(at, Observation(at, (), (Sample("g2", at, 50.0),), (w,)), {"j": w}, [], [], GPUS)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot read the instances" in m for m in messages) == 1
    assert sum("reads the instances' rates again" in m for m in messages) == 1
    [row] = store.ledger.showback(date(2026, 11, 1), date(2026, 11, 2))
    assert row.key.rate == "spot"  # the outage's ticks kept n1's last known rate
    assert row.amounts.held_gpu_hours == pytest.approx(40 / 60)


def test_an_instance_with_its_own_price_is_charged_at_it_per_gpu() -> None:
    """The cloud's price of the whole instance (per-type prices, the pricing read) beats the price
    table's: a spot instance of 2 GPUs at 9.00 an hour is 4.50 a GPU-hour."""
    cloud = Instances()
    n1 = cloud.by_node["n1"]
    cloud.by_node["n1"] = Instance(n1.id, "n1", n1.instance_type, n1.lifecycle, "running", START, 2, 9.0)
    store = MemoryStore()
    rec = LedgerRecorder(store, PRICES, instances=cloud)
    w = Workload("j", WorkloadKind.JOB, "j", Owner("alice", "vision"), 1, ("g2",), START)
    for minutes in (0, 10):
        at = START + timedelta(minutes=minutes)
        rec.record(at, Observation(at, (), (Sample("g2", at, 50.0),), (w,)), {"j": w}, [], [], GPUS)
    [row] = store.ledger.showback(date(2026, 11, 1), date(2026, 11, 2))
    assert row.key.rate == "spot"
    assert row.amounts.spend == pytest.approx(10 / 60 * 4.5)
    assert PRICES.price("NVIDIA A100-SXM4-80GB", "spot") != pytest.approx(4.5)
