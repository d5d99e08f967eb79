"""The parking planner, table-driven: windows, minimums, held GPUs, the forecast's band, unparking."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from gpusteward.domain.models import Level
from gpusteward.policy.parking import (
    NodeView,
    ParkingInput,
    PoolForecast,
    plan_parking,
    schedule_window,
)
from gpusteward.policy.parking_settings import ParkingSettings

NIGHT = datetime(2026, 1, 5, 23, 0, tzinfo=UTC)  # inside 22:00-06:00 UTC
DAY = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
LONG_AGO = NIGHT - timedelta(hours=3)


def node(name: str, *, held: int = 0, free: bool = True, parked: bool = False, **kw: Any) -> NodeView:
    return NodeView(
        name=name,
        pool=kw.pop("pool", "a100"),
        gpu_uuids=tuple(f"{name}-{i}" for i in range(kw.pop("gpus", 8))),
        held=held,
        free_since=kw.pop("free_since", LONG_AGO) if free and held == 0 else None,
        parked=parked,
        parked_at=LONG_AGO if parked else None,
        **kw,
    )


def settings(**kw: Any) -> ParkingSettings:
    base: dict[str, Any] = {
        "enabled": True,
        "windows": ["22:00-06:00"],
        "min_free_gpus": 8,
        "min_spare_nodes": 1,
        "idle_minutes": 60,
        "max_per_tick": 10,
        "prewarm_minutes": 30,
    }
    return ParkingSettings(**{**base, **kw})


def plan(nodes: list[NodeView], now: datetime = NIGHT, forecasts: Any = None, **kw: Any) -> Any:
    return plan_parking(ParkingInput(now, nodes, forecasts), settings(**kw))


def parked(p: Any) -> list[str]:
    return [d.workload_id.removeprefix("node:") for d in p.parks]


def unparked(p: Any) -> list[str]:
    return [d.workload_id.removeprefix("node:") for d in p.unparks]


@pytest.mark.parametrize(
    ("nodes", "kw", "want"),
    [
        # Four free nodes of 8 GPUs: keep 8 free GPUs and 1 spare node, park the other three.
        ([node("n1"), node("n2"), node("n3"), node("n4")], {}, ["n1", "n2", "n3"]),
        # Never below the minimum: 16 free GPUs kept leaves room to park two only.
        ([node("n1"), node("n2"), node("n3"), node("n4")], {"min_free_gpus": 16}, ["n1", "n2"]),
        # Spare nodes count too: two spares kept.
        ([node("n1"), node("n2"), node("n3")], {"min_spare_nodes": 2, "min_free_gpus": 0}, ["n1"]),
        # A held GPU: never parked, whatever the rest.
        (
            [node("busy", held=1), node("n2"), node("n3")],
            {"min_free_gpus": 0, "min_spare_nodes": 0},
            ["n2", "n3"],
        ),
        # Not free for idle_minutes yet.
        ([node("new", free_since=NIGHT - timedelta(minutes=30)), node("n2")], {"min_free_gpus": 0}, ["n2"]),
        # Not idle now (busy GPUs without holder, stale data): free_since None, never a candidate.
        ([node("n1", free=False), node("n2"), node("n3")], {}, ["n2", "n3"]),
        # A node someone else cordoned is left out and counts as no capacity.
        ([node("admin", foreign=True), node("n2"), node("n3")], {}, ["n2"]),
        # At most max_per_tick, longest free first.
        (
            [node("n1", free_since=LONG_AGO + timedelta(minutes=5)), node("n2"), node("n3"), node("n4")],
            {"max_per_tick": 2},
            ["n2", "n3"],
        ),
        # Only configured pools.
        (
            [node("n1", pool="h100"), node("n2"), node("n3")],
            {"pools": ["h100"], "min_free_gpus": 0, "min_spare_nodes": 0},
            ["n1"],
        ),
    ],
)
def test_which_nodes_are_parked(nodes: list[NodeView], kw: dict[str, Any], want: list[str]) -> None:
    p = plan(nodes, **kw)
    assert parked(p) == want
    assert unparked(p) == []
    for d in p.parks:
        assert d.level is Level.INFRA
        assert d.step == "park-node"
        assert d.idempotency_key.startswith(f"{d.workload_id}:park:20260105T2200Z:")
        assert "free and idle" in d.reason


def test_outside_the_window_nothing_is_parked_and_ours_come_back_not_others() -> None:
    nodes = [node("n1"), node("n2", parked=True), node("admin", parked=False, foreign=True), node("n4")]
    p = plan(nodes, now=DAY)
    assert parked(p) == []
    assert unparked(p) == ["n2"]
    (d,) = p.unparks
    assert d.step == "unpark-node"
    assert "outside the configured windows" in d.reason
    assert d.idempotency_key == f"node:n2:unpark:{LONG_AGO:%Y%m%dT%H%M%SZ}"


def test_prewarm_unparks_before_the_window_ends() -> None:
    nodes = [node("n1", parked=True), node("n2"), node("n3")]
    assert unparked(plan(nodes, now=datetime(2026, 1, 6, 5, 29, tzinfo=UTC))) == []
    p = plan(nodes, now=datetime(2026, 1, 6, 5, 31, tzinfo=UTC))
    assert unparked(p) == ["n1"]
    assert "pre-warm" in p.unparks[0].reason


def test_demand_returned_unparks_until_the_minimum_holds_again_oldest_first() -> None:
    early = LONG_AGO - timedelta(hours=1)
    nodes = [
        node("busy1", held=8),
        node("busy2", held=6),
        node("p-new", parked=True),
        NodeView("p-old", "a100", tuple(f"o{i}" for i in range(8)), 0, LONG_AGO, True, early),
    ]
    p = plan(nodes, min_free_gpus=8, min_spare_nodes=0)
    # 2 free GPUs unparked < 8: one node (the oldest parked) is enough.
    assert unparked(p) == ["p-old"]
    assert parked(p) == []
    assert "demand returned" in p.unparks[0].reason


def test_paused_does_nothing() -> None:
    p = plan_parking(ParkingInput(DAY, [node("n1", parked=True)], paused=True), settings())
    assert (p.parks, p.unparks) == ((), ())


def fc(spread: float = 1.0, *, rise: datetime | None = None, low: bool = True) -> PoolForecast:
    return PoolForecast(
        NIGHT - timedelta(hours=1) if low else None,
        NIGHT + timedelta(hours=4) if low else None,
        spread_gpus=spread,
        slo_headroom=0.25,
        next_rise=rise,
    )


@pytest.mark.parametrize(
    ("forecasts", "want_park", "why"),
    [
        ({"a100": fc(1.0)}, True, "forecast low-load window"),
        # 4 nodes x 8 GPUs x 0.25 = 8 GPUs of headroom; a band 9 GPUs wide crosses it.
        ({"a100": fc(9.0)}, False, "crosses the SLO headroom"),
        ({"a100": fc(low=False)}, False, "no low-load window"),
        ({}, False, "no forecast for pool"),
        ({"a100": fc(1.0, rise=NIGHT + timedelta(minutes=20))}, False, "pre-warm"),
    ],
)
def test_the_forecast_gates_parking(forecasts: dict[str, PoolForecast], want_park: bool, why: str) -> None:
    nodes = [node("n1"), node("n2"), node("n3"), node("p", parked=True)]
    p = plan(nodes, forecasts=forecasts, use_forecast=True)
    assert bool(p.parks) is want_park
    assert why in p.notes[0].why
    # When the forecast does not allow parking, our parked node comes back.
    assert unparked(p) == ([] if want_park else ["p"])


def test_forecast_only_without_configured_windows() -> None:
    p = plan([node("n1"), node("n2")], forecasts={"a100": fc()}, windows=[], use_forecast=True)
    assert parked(p) == ["n1"]


@pytest.mark.parametrize(
    ("at", "want"),
    [
        (datetime(2026, 1, 5, 21, 59, tzinfo=UTC), None),
        (datetime(2026, 1, 5, 22, 0, tzinfo=UTC), (datetime(2026, 1, 5, 22), datetime(2026, 1, 6, 6))),
        (datetime(2026, 1, 6, 5, 59, tzinfo=UTC), (datetime(2026, 1, 5, 22), datetime(2026, 1, 6, 6))),
        (datetime(2026, 1, 6, 6, 0, tzinfo=UTC), None),
    ],
)
def test_schedule_window_over_midnight(at: datetime, want: Any) -> None:
    got = schedule_window(at, [(time(22), time(6))], UTC)
    assert got == (None if want is None else tuple(w.replace(tzinfo=UTC) for w in want))


def test_schedule_window_in_a_time_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    # 22:30 UTC is 23:30 in Berlin in January: inside 23:00-05:00 local.
    got = schedule_window(datetime(2026, 1, 5, 22, 30, tzinfo=UTC), [(time(23), time(5))], berlin)
    assert got == (datetime(2026, 1, 5, 22, 0, tzinfo=UTC), datetime(2026, 1, 6, 4, 0, tzinfo=UTC))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"windows": ["22-06"]}, "HH:MM-HH:MM"),
        ({"windows": ["25:00-06:00"]}, "hours are 00-23"),
        ({"windows": ["06:00-06:00"]}, "empty"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"idle_minutes": 0}, "greater than 0"),
        ({"max_per_tic": 3}, "Extra inputs"),
    ],
)
def test_bad_settings_are_rejected(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ParkingSettings(**kw)
