"""Consolidation through the one tick: planned from the live window once a history is covered,
moved one workload at a time through the runner, behind an admin's approval; a rollback on
contention never waits; nothing is planned before the history is long enough."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.conftest import small_settings

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ApprovalStatus, Decision, Hold, Level, Outcome, Workload, WorkloadKind
from gpusteward.integrations.sim import DEFAULT_START, SimCluster, SimSource
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.integrations.sim.scenarios import Row, Scenario
from gpusteward.policy.consolidation import ConsolidationSettings, Move, plan_moves
from gpusteward.runtime.consolidation_doc import PLAN_KEY, read_plan
from gpusteward.runtime.owner_controls import decide_approval

#: Six light, bursty services (one GPU each, ~10-min bursts an hour) on 4 nodes x 2 GPUs.
LIGHT = Scenario(
    "light",
    (Row(Behaviour.SERVING, WorkloadKind.POD, "svc", 1, 6, (-1, -1), (48, 48), (0, 0), "nlp"),),
    nodes=4,
    gpus_per_node=2,
    repeat_daily=False,
    scale=False,
)
TICK_S = 300


class FakeMover:
    """Claims the L4 consolidation steps on sim workloads and records them."""

    name = "sim"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def supports(self, workload: Workload, level: Level) -> bool:
        return level is Level.INFRA and workload.kind is WorkloadKind.POD

    def current(self, workload: Workload) -> Workload | None:
        return workload

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        self.calls.append((decision.step, workload.id, decision.idempotency_key))
        return Outcome(True, f"{decision.step} {workload.id}", verified=True)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        return True


def consolidation(**extra: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "min_history_hours": 2,
        "plan_every_minutes": 30,
        "watch_minutes": 60,
        "contention_share_max": 0.05,
        **extra,
    }


def light(tmp_path: Path, make_steward: Any, **settings: Any) -> tuple[Any, Any, FakeMover]:
    mover = FakeMover()
    cluster = SimCluster(start=DEFAULT_START, scenario=LIGHT)
    integration = Integration(name="sim", source=SimSource(cluster), executors=[mover], ground_truth=cluster)
    cfg = small_settings(
        tmp_path / "state.db",
        tick_seconds=TICK_S,
        analysis={"stale_after_seconds": 900},
        consolidation=consolidation(),
        **settings,
    )
    steward, _, clock, _ = make_steward(cfg, integration=integration, backfill=False)
    return steward, clock, mover


def run(steward: Any, clock: Any, hours: float) -> list[Any]:
    reports = []
    for _ in range(int(hours * 3600 / TICK_S)):
        reports.append(steward.tick())
        clock.advance(TICK_S)
    return reports


def moves(reports: list[Any]) -> list[Decision]:
    return [d for r in reports for d in r.decisions if d.rule == "consolidation"]


def test_nothing_is_planned_before_the_history_covers_min_history_hours(
    tmp_path: Path, make_steward: Any
) -> None:
    steward, clock, mover = light(tmp_path, make_steward)
    assert moves(run(steward, clock, 1.9)) == []
    assert steward.consolidation.last is None
    assert mover.calls == []


def test_a_move_waits_for_an_admin_then_runs_once_and_the_next_waits_for_the_watch(
    tmp_path: Path, make_steward: Any
) -> None:
    steward, clock, mover = light(tmp_path, make_steward)
    store = steward.store
    first = moves(run(steward, clock, 2.5))
    plan = steward.consolidation.last
    assert plan is not None
    assert plan.gpus_after < plan.gpus_before, "light services share GPUs"
    stored = read_plan(store.load_doc(PLAN_KEY))
    assert stored is not None, "the leader stores the plan for the weekly report"
    assert (stored.gpus_before, stored.gpus_after) == (plan.gpus_before, plan.gpus_after)
    assert first
    assert all(d.step == "share-gpu" and d.level is Level.INFRA for d in first)
    assert {d.hold for d in first} == {Hold.AWAITING_APPROVAL}, "L4 waits for an admin by default"
    assert len({d.workload_id for d in first}) == 1, "one workload at a time"
    assert mover.calls == []
    (pending,) = store.approvals(ApprovalStatus.PENDING)
    assert ":share-gpu:" in pending.idempotency_key
    decide_approval(store, pending.id, approve=True, by="alice", reason="try it", now=clock.now())
    later = moves(run(steward, clock, 0.5))
    assert [c[0] for c in mover.calls] == ["share-gpu"]
    assert mover.calls[0][1] == pending.workload_id
    # The next move waits while the first is watched (and gets no approval request yet).
    assert {d.hold for d in later if d.workload_id != pending.workload_id} <= {Hold.WAITING}
    assert store.approvals(ApprovalStatus.PENDING) == []
    assert store.approval(pending.id).status is ApprovalStatus.USED


def test_dry_run_previews_the_move_and_touches_nothing(tmp_path: Path, make_steward: Any) -> None:
    steward, clock, mover = light(tmp_path, make_steward, mode="dry-run")
    assert moves(run(steward, clock, 2.5))
    assert mover.calls == []


def test_a_source_that_cannot_move_workloads_is_refused(tmp_path: Path, make_steward: Any) -> None:
    cluster = SimCluster(start=DEFAULT_START, scenario=LIGHT)
    integration = Integration(name="sim", source=SimSource(cluster), ground_truth=cluster)
    cfg = small_settings(tmp_path / "state.db", consolidation=consolidation())
    with pytest.raises(ConfigError, match="cannot move workloads onto shared GPUs"):
        make_steward(cfg, integration=integration, backfill=False)


class G:
    def __init__(self, *members: str) -> None:
        self.members = members
        self.contention_share = 0.0
        self.peak_memory_mib = 1024.0


def test_policy_rolls_back_a_contended_move_without_approval_and_never_moves_twice() -> None:
    s = ConsolidationSettings(enabled=True, watch_minutes=60, rollback_contention_share=0.01)
    now = DEFAULT_START
    inc = {"a": "1", "b": "1", "c": "1"}
    (d,) = plan_moves([G("a", "b", "c")], inc, [], now, s, paused=False)
    assert (d.workload_id, d.step, d.hold) == ("a", "share-gpu", Hold.NONE)
    assert d.idempotency_key == "a:share-gpu:1:nvidia.com/gpu.shared"
    hot = Move("a", s.resource, now, contention_share=0.2)
    (back,) = plan_moves([G("a", "b", "c")], inc, [hot], now + timedelta(minutes=10), s, paused=False)
    assert (back.workload_id, back.step) == ("a", "unshare-gpu")
    from gpusteward.policy.approval import NEVER_WAITS

    assert back.step in NEVER_WAITS
    calm = Move("a", s.resource, now)
    (wait,) = plan_moves([G("a", "b", "c")], inc, [calm], now + timedelta(minutes=10), s, paused=False)
    assert (wait.workload_id, wait.hold) == ("b", Hold.WAITING)
    (nxt,) = plan_moves([G("a", "b", "c")], inc, [calm], now + timedelta(minutes=61), s, paused=True)
    assert (nxt.workload_id, nxt.hold) == ("b", Hold.PAUSED)
    assert plan_moves([G("a"), G("b")], inc, [], now, s, paused=False) == [], "alone: nothing to move"
