"""A follower replica changes nothing anywhere: no scale, no park, no stop, no notice, no row.

The same cluster, config and clock run twice, once as the leader and once as a follower (its
``Leadership.acquire()`` says no). The leader run shows that every kind of action is due in this
setup (a tide scale-down of pool ``web`` from 14 replicas, parks of idle nodes, warnings and a
graceful stop, consolidation moves of light services); the follower run must do none of them, and
write nothing to the state store (nor plan a consolidation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, inspect, text
from tests.runtime.conftest import small_settings

from gpusteward.domain.integration import Integration
from gpusteward.domain.models import Decision, Level, Outcome, Workload, WorkloadKind
from gpusteward.integrations.sim import DEFAULT_START, SimClock, SimCluster, SimSource
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.integrations.sim.executor import SimExecutor
from gpusteward.integrations.sim.node_control import SimNodeControl
from gpusteward.integrations.sim.pool_scaler import SimPoolScaler
from gpusteward.integrations.sim.scenarios import Row, Scenario
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward

pytest.importorskip("statsmodels")

#: 5 nodes x 2 GPUs: node 00 trains, a zombie job wastes node 01, two light services share
#: node 02 (one GPU each: consolidation packs them), nodes 03 and 04 stand free.
FOUR = Scenario(
    "four",
    (
        Row(Behaviour.TRAINING, WorkloadKind.JOB, "pretrain", 2, 1, (-2, -2), (48, 48), (0, 0), "nlp"),
        Row(Behaviour.ZOMBIE, WorkloadKind.JOB, "leftover", 2, 1, (-3, -3), (30, 30), (1, 1), "speech"),
        Row(Behaviour.SERVING, WorkloadKind.POD, "svc", 1, 2, (-1, -1), (48, 48), (0, 0), "recsys"),
    ),
    nodes=5,
    gpus_per_node=2,
    repeat_daily=False,
    scale=False,
)
TICK_S = 300


class NeverLeader:
    name = "test"

    def acquire(self) -> bool:
        return False

    def release(self) -> None:
        pass


class SpyMover:
    """Claims the consolidation moves (L4 on pods) and records them; changes nothing."""

    name = "sim"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def supports(self, workload: Workload, level: Level) -> bool:
        return level is Level.INFRA and workload.kind is WorkloadKind.POD

    def current(self, workload: Workload) -> Workload | None:
        return workload

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        self.calls.append((decision.step, workload.id))
        return Outcome(True, "moved", verified=True)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        return True


class SpyExecutor:
    """Records every call that would change a workload, then does it through the real one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[str, str, Level]] = []

    def supports(self, workload: Workload, level: Level) -> bool:
        return bool(self.inner.supports(workload, level))

    def current(self, workload: Workload) -> Workload | None:
        got: Workload | None = self.inner.current(workload)
        return got

    def verify(self, decision: Decision, workload: Workload) -> bool:
        return bool(self.inner.verify(decision, workload))

    def _call(self, what: str, decision: Decision, workload: Workload) -> Outcome:
        self.calls.append((what, decision.step, decision.level))
        out: Outcome = getattr(self.inner, what)(decision, workload)
        return out

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        return self._call("execute", decision, workload)

    def begin(self, decision: Decision, workload: Workload) -> Outcome:
        return self._call("begin", decision, workload)

    def complete(self, decision: Decision, workload: Workload) -> Outcome:
        return self._call("complete", decision, workload)


def nine_days_of_tide(path: Path) -> Path:
    """Demand of pool ``web`` for the nine days before the start: 2 GPUs at night, 10 by day."""
    t = DEFAULT_START.timestamp() - 9 * 86_400 + 900.0 * np.arange(9 * 96)
    hour = (t % 86_400) / 3600
    demand = np.where((hour >= 8) & (hour < 20), 10.0, 2.0) + np.random.default_rng(0).normal(0, 0.2, t.size)
    path.write_text("time,demand\n" + "".join(f"{a:.0f},{b:.3f}\n" for a, b in zip(t, demand, strict=True)))
    return path


def run(tmp_path: Path, *, leader: bool) -> dict[str, Any]:
    db = tmp_path / "state.db"
    settings = small_settings(
        db,
        tick_seconds=TICK_S,
        analysis={"stale_after_seconds": 900},
        policy={
            "approval": {"min_level": "off"},
            "ladder": {"warn_again_after_minutes": 10, "graceful_stop_after_minutes": 20},
        },
        parking={
            "enabled": True,
            "windows": ["00:00-12:00"],
            "min_free_gpus": 0,
            "min_spare_nodes": 0,
            "idle_minutes": 20,
        },
        consolidation={"enabled": True, "min_history_hours": 0.5, "plan_every_minutes": 30},
        forecast={
            "enabled": True,
            "simulations": 200,
            "history_dir": str(tmp_path / "demand"),
            "pools": [
                {
                    "name": "web",
                    "scaler": "sim",
                    "min_replicas": 2,
                    "max_replicas": 16,
                    "history_csv": str(nine_days_of_tide(tmp_path / "web.csv")),
                }
            ],
        },
    )
    clock = SimClock(DEFAULT_START)
    cluster = SimCluster(start=DEFAULT_START, scenario=FOUR)
    spy = SpyExecutor(SimExecutor(cluster))
    mover = SpyMover()
    scaler = SimPoolScaler.of({"web": 14})
    integration = Integration(
        name="sim",
        source=SimSource(cluster),
        executors=[spy, mover],
        node_control=SimNodeControl(cluster),
        pool_scaler=scaler,
        ground_truth=cluster,
    )
    notifier = MemoryNotifier()
    steward, _ = build_steward(settings, clock=clock, notifier=notifier, integration=integration)
    if not leader:
        steward.leadership = NeverLeader()
    engine = create_engine(f"sqlite:///{db}")
    before = rows(engine)
    reports = []
    for _ in range(30):  # 2.5 hours
        reports.append(steward.tick())
        clock.advance(TICK_S)
    return {
        "reports": reports,
        "scaler": scaler,
        "cluster": cluster,
        "spy": spy,
        "mover": mover,
        "plan": steward.consolidation.last if steward.consolidation else None,
        "notifier": notifier,
        "before": before,
        "after": rows(engine),
    }


def rows(engine: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but Alembic's."""
    with engine.connect() as conn:
        return {
            t: sorted(map(tuple, conn.execute(text(f'SELECT * FROM "{t}"'))), key=repr)
            for t in inspect(engine).get_table_names()
            if t != "alembic_version"
        }


def test_the_leader_has_every_kind_of_action_to_take(tmp_path: Path) -> None:
    got = run(tmp_path, leader=True)
    assert got["scaler"].calls, "the tide scales pool web"
    assert got["scaler"].pools["web"] < 14
    parks = [a for a in got["after"]["actions"] if "park-node" in a]
    assert parks, "idle nodes are parked"
    assert {level for _, _, level in got["spy"].calls} >= {Level.GRACEFUL_STOP}, "the zombie is stopped"
    assert got["notifier"].sent, "its owner is warned"
    assert got["plan"] is not None
    assert got["plan"].gpus_after < got["plan"].gpus_before
    # Both light services move to the shared GPU, one after the other (the second after the
    # first's 60-minute watch).
    assert [step for step, _ in got["mover"].calls] == ["share-gpu", "share-gpu"]
    assert len({w for _, w in got["mover"].calls}) == 2
    assert got["after"] != got["before"]


def test_a_follower_changes_nothing_anywhere(tmp_path: Path) -> None:
    got = run(tmp_path, leader=False)
    assert all(not r.leader and not r.actions and not r.decisions for r in got["reports"])
    assert any(r.findings for r in got["reports"]), "it sensed and analysed"
    # No scale, no park, no stop or warning, no notice...
    assert got["scaler"].calls == []
    assert got["scaler"].pools["web"] == 14
    assert got["cluster"].parked_nodes == {}
    assert got["spy"].calls == []
    assert got["mover"].calls == [], "no consolidation move"
    assert got["plan"] is None, "and no consolidation plan: planning is past the leader gate"
    assert got["cluster"].endings() == ()
    assert got["notifier"].sent == []
    # ...and no row: no action, audit record, decision, notice, finding or ledger mark.
    assert got["after"] == got["before"]
    assert not (tmp_path / "demand").exists() or not any((tmp_path / "demand").iterdir())
