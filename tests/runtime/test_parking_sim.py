"""L4 parking end to end on a simulated night: parked in the window, unparked for demand and when it
ends; dry-run records only; with the default approvals a park waits for an admin, then runs once."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.runtime.conftest import small_settings

from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ActionStatus, ApprovalStatus, Hold, Level, WorkloadKind
from gpusteward.integrations.sim import DEFAULT_START, SimCluster, SimSource
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.integrations.sim.node_control import SimNodeControl
from gpusteward.integrations.sim.scenarios import Row, Scenario
from gpusteward.policy.parking import NodeView, ParkingInput, plan_parking
from gpusteward.runtime.config import Settings
from gpusteward.runtime.owner_controls import decide_approval
from gpusteward.runtime.parking_step import ParkingStep

TRAINING = Behaviour.TRAINING
#: 4 nodes x 2 GPUs from 00:00: node 00 busy all night; a 2-GPU job arrives at 01:00 for one hour.
NIGHT = Scenario(
    "night",
    (
        Row(TRAINING, WorkloadKind.JOB, "pretrain", 2, 1, (-2, -2), (48, 48), (0, 0), "nlp"),
        Row(TRAINING, WorkloadKind.JOB, "burst", 2, 1, (1, 1), (1, 1), (0, 0), "nlp"),
    ),
    nodes=4,
    gpus_per_node=2,
    repeat_daily=False,
    scale=False,
)
TICK_S = 300


def night_settings(tmp_path: Path, **overrides: Any) -> Settings:
    parking = {
        "enabled": True,
        "windows": ["00:30-04:00"],
        "timezone": "UTC",
        "min_free_gpus": 2,
        "min_spare_nodes": 1,
        "idle_minutes": 20,
        "max_per_tick": 1,
        "prewarm_minutes": 30,
    }
    return small_settings(
        tmp_path / "state.db",
        tick_seconds=TICK_S,
        analysis={"stale_after_seconds": 900},
        parking=parking,
        **overrides,
    )


def night_integration() -> Integration:
    cluster = SimCluster(start=DEFAULT_START, scenario=NIGHT)
    return Integration(
        name="sim", source=SimSource(cluster), node_control=SimNodeControl(cluster), ground_truth=cluster
    )


def node_actions(store: Any) -> list[Any]:
    return [a for a in store.actions(limit=1000) if a.workload_id.startswith("node:")]


def tick_until(steward: Any, clock: Any, until: Any, cluster: SimCluster) -> list[tuple[Any, set[str]]]:
    """Tick every TICK_S until ``until``; (time, parked nodes) after each tick."""
    seen = []
    while clock.now() < until:
        steward.tick()
        seen.append((clock.now(), set(cluster.parked_nodes)))
        clock.advance(TICK_S)
    return seen


def test_a_night_parks_idle_nodes_keeps_the_minimum_and_unparks_for_demand_and_at_the_end(
    tmp_path: Path, make_steward: Any
) -> None:
    settings = night_settings(tmp_path, policy={"approval": {"min_level": "off"}})
    steward, integration, clock, _ = make_steward(settings, integration=night_integration(), backfill=False)
    cluster = integration.ground_truth
    assert isinstance(steward.parking, ParkingStep)
    start = DEFAULT_START

    seen = tick_until(steward, clock, start + timedelta(minutes=55), cluster)
    before = [p for at, p in seen if at < start + timedelta(minutes=30)]
    assert all(not p for p in before), "nothing is parked before the window"
    # One a tick, never the busy node 00, and 2 free GPUs + 1 spare node stay unparked.
    assert seen[-1][1] == {"sim-node-01", "sim-node-02"}
    assert all("sim-node-00" not in p and len(p) <= 2 for _, p in seen)

    # 01:00: the burst job lands on the one unparked free node; free GPUs fall below the minimum,
    # so a parked node comes back at once (the oldest parked first).
    seen = tick_until(steward, clock, start + timedelta(minutes=70), cluster)
    assert "sim-node-01" not in seen[-1][1]
    burst = next(w for w in steward.workloads.values() if w.name.startswith("burst"))
    assert {steward.gpus[u].node for u in burst.gpu_uuids} == {"sim-node-03"}

    # The window ends at 04:00, less 30 min of pre-warm: everything is back by 03:30.
    seen = tick_until(steward, clock, start + timedelta(hours=4, minutes=10), cluster)
    parked_at_330 = [p for at, p in seen if at >= start + timedelta(hours=3, minutes=30)]
    assert parked_at_330
    assert all(not p for p in parked_at_330)
    assert any(p for at, p in seen if at < start + timedelta(hours=3, minutes=30)), (
        "re-parked after the burst"
    )

    acts = node_actions(steward.store)
    assert {a.step for a in acts} == {"park-node", "unpark-node"}
    assert all(a.level is Level.INFRA and a.status is ActionStatus.SUCCEEDED and not a.dry_run for a in acts)
    parks = [a for a in acts if a.step == "park-node"]
    unparks = [a for a in acts if a.step == "unpark-node"]
    assert len(parks) == len(unparks) >= 3
    assert "sim-node-00" not in {a.workload_id for a in acts}
    assert len({a.idempotency_key for a in acts}) == len(acts)
    events = {r.event for r in steward.store.audit_log(limit=2000)}
    assert {"action.start", "action.succeeded"} <= events


def test_dry_run_records_the_parks_once_and_touches_nothing(tmp_path: Path, make_steward: Any) -> None:
    settings = night_settings(tmp_path, mode="dry-run")
    steward, integration, clock, _ = make_steward(settings, integration=night_integration(), backfill=False)
    seen = tick_until(steward, clock, DEFAULT_START + timedelta(hours=2), integration.ground_truth)
    assert all(not p for _, p in seen)
    acts = node_actions(steward.store)
    assert acts, "dry-run records what it would park"
    assert all(a.dry_run and a.status is ActionStatus.SKIPPED and a.step == "park-node" for a in acts)
    assert all("dry-run: would park-node" in a.detail for a in acts)
    # The same node in the same window and free episode is recorded once, not every tick.
    assert len({a.idempotency_key for a in acts}) == len(acts)
    assert len(acts) <= 3
    assert steward.store.approvals() == []


def test_with_default_approvals_a_park_waits_for_an_admin_and_runs_once_approved(
    tmp_path: Path, make_steward: Any
) -> None:
    steward, integration, clock, notifier = make_steward(
        night_settings(tmp_path), integration=night_integration(), backfill=False
    )
    cluster = integration.ground_truth
    store = steward.store
    seen = tick_until(steward, clock, DEFAULT_START + timedelta(minutes=50), cluster)
    assert all(not p for _, p in seen), "no park without an approval"
    pending = store.approvals(ApprovalStatus.PENDING)
    assert pending, "the park was asked for"
    assert all(p.workload_id.startswith("node:") and ":park:" in p.idempotency_key for p in pending)
    assert [a for a in node_actions(store) if a.step == "park-node"] == []
    admin = [n for n in notifier.sent if n.owner is None]
    assert any(f"gpusteward approvals approve {p.id}" in n.body for p in pending for n in admin)
    held = store.decisions_for(pending[0].workload_id)
    assert held[-1].hold is Hold.AWAITING_APPROVAL
    # Asked once per step, not once per tick.
    assert len({p.idempotency_key for p in pending}) == len(pending)

    first = pending[0]
    decide_approval(store, first.id, approve=True, by="alice", reason="quiet night", now=clock.now())
    tick_until(steward, clock, clock.now() + timedelta(seconds=TICK_S), cluster)
    node = first.workload_id.removeprefix("node:")
    assert node in cluster.parked_nodes
    assert store.approval(first.id).status is ApprovalStatus.USED
    (park,) = [a for a in node_actions(store) if a.step == "park-node"]
    assert (park.workload_id, park.status) == (first.workload_id, ActionStatus.SUCCEEDED)
    # Unparking gives capacity back: it never waits for an approval.
    tick_until(steward, clock, DEFAULT_START + timedelta(hours=3, minutes=35), cluster)
    assert node not in cluster.parked_nodes
    assert [a.status for a in node_actions(store) if a.step == "unpark-node"] == [ActionStatus.SUCCEEDED]


def test_the_parked_command_lists_what_is_parked_now(tmp_path: Path, make_steward: Any) -> None:
    from typer.testing import CliRunner

    from gpusteward.cli.main import app

    settings = night_settings(tmp_path, policy={"approval": {"min_level": "off"}})
    steward, integration, clock, _ = make_steward(settings, integration=night_integration(), backfill=False)
    tick_until(steward, clock, DEFAULT_START + timedelta(minutes=55), integration.ground_truth)
    config = tmp_path / "gpusteward.yaml"
    config.write_text(f"mode: enforce\nstore: {{url: '{settings.store.url}'}}\n")
    got = CliRunner().invoke(app, ["parked", "--config", str(config), "--json"])
    assert got.exit_code == 0, got.output
    rows = json.loads(got.stdout)
    assert (
        {r["node"] for r in rows}
        == set(integration.ground_truth.parked_nodes)
        == {"sim-node-01", "sim-node-02"}
    )
    assert all(r["gpus"] == 2 and not r["dry_run"] for r in rows)
    # After the window, nothing is parked, and the table says so.
    tick_until(steward, clock, DEFAULT_START + timedelta(hours=3, minutes=40), integration.ground_truth)
    got = CliRunner().invoke(app, ["parked", "--config", str(config)])
    assert got.exit_code == 0, got.output
    assert "no node is parked" in got.output


def test_the_tide_forecast_becomes_the_pools_window_and_its_band_vetoes_parking(tmp_path: Path) -> None:
    """ParkingStep.forecasts: the tide's last plan (read through ``TideForecasts``) → the planner's
    view (window, band, pre-warm)."""
    import numpy as np

    from gpusteward.analysis.forecast import Forecast
    from gpusteward.analysis.tide import LowWindow
    from gpusteward.policy.parking_settings import ParkingSettings
    from gpusteward.runtime.tide_step import TideOutcome

    now = DEFAULT_START + timedelta(hours=1)
    t0, step = now.timestamp(), 900.0

    def tide(spread: float) -> Any:
        mean = np.full(16, 2.0)
        fc = Forecast(t0, step, mean, mean - spread, mean + spread, 0.9, "daily")
        window = LowWindow(t0, t0 + 8 * step, float((mean + spread)[:8].max()), 2.0)
        outcome = TideOutcome("a100", now, "steady", "", None, fc, (window,))
        pools = [type("P", (), {"name": "a100", "slo_headroom": 0.25})()]
        return type("Tide", (), {"last": [outcome], "settings": type("S", (), {"pools": pools})()})()

    ps = ParkingStep(ParkingSettings(enabled=True, use_forecast=True), None, tide(1.0))  # type: ignore[arg-type]
    views = ps.forecasts(now)
    assert views is not None
    (view,) = views.values()
    assert view.low_start == now
    assert view.low_end == now + timedelta(hours=2)
    assert view.spread_gpus == 1.0
    assert view.slo_headroom == 0.25
    # The window's start stays put across re-forecasts (stable keys); a wider band is passed on.
    ps.tide = tide(5.0)
    views = ps.forecasts(now + timedelta(minutes=15))
    assert views is not None
    (later,) = views.values()
    assert later.low_start == now
    assert later.spread_gpus == 5.0
    nodes = [NodeView(f"n{i}", "a100", (f"g{i}a", f"g{i}b"), 0, now - timedelta(hours=9)) for i in range(8)]
    sett = ParkingSettings(enabled=True, use_forecast=True, min_free_gpus=2, idle_minutes=60)
    calm = plan_parking(ParkingInput(now, nodes, {"a100": view}), sett)
    unsure = plan_parking(ParkingInput(now, nodes, {"a100": later}), sett)
    assert calm.parks  # 1 GPU of band < 4 GPUs of headroom (16 GPUs x 0.25)
    assert unsure.parks == ()
    assert "crosses the SLO headroom" in unsure.notes[0].why
