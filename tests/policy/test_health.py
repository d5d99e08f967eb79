"""GPU health in policy: a workload on a failed GPU is never stopped as idle, its owner is told
once, its node's drain is planned; degrading and throttled GPUs lead to notices only."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.health import Health
from gpusteward.domain.models import (
    Decision,
    Finding,
    Gpu,
    Hold,
    LadderState,
    Level,
    Owner,
    RuleAction,
    Workload,
    WorkloadKind,
)
from gpusteward.policy import PolicyInput, PolicySettings, decide
from gpusteward.policy.health import DRAIN, gpu_health, plan_drains
from gpusteward.policy.health_settings import HealthSettings

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
GPUS = {f"GPU-{i}": Gpu(f"GPU-{i}", f"node{i // 2}", i % 2, "H100", 81920.0, 3.0) for i in range(4)}
JOB = Workload(
    "job-1", WorkloadKind.JOB, "train", Owner("alice", "nlp"), 2, ("GPU-0", "GPU-1"), T0 - timedelta(hours=5)
)
XID79 = "node0/gpu0: Xid 79 (GPU has fallen off the bus); fatal Xid max 1 over 30m"


def _idle(at: datetime) -> Finding:
    """The job at 0 % for hours: what a failed GPU's holder looks like to the waste rules."""
    return Finding(
        "idle-allocation", "idle", RuleAction.RECLAIM, at, JOB.gpu_uuids, JOB.id, {}, 240, 8, 24, "idle"
    )


def _health(rule: str, uuid: str, wid: str | None, at: datetime, message: str = "") -> Finding:
    return Finding(rule, "health", RuleAction.REPAIR, at, (uuid,), wid, {}, 30, 0.5, 1.5, message or rule)


#: No blast-radius budget in the way: the control case must be able to reach a force stop.
OPEN = PolicySettings(budget={"max_gpu_share_per_hour": 1.0})


def _run(extra: str | None, hours: float = 4, settings: PolicySettings | None = None) -> list[Decision]:
    """Every 5 min for ``hours``: the idle finding and (``extra``) a health finding on GPU-0."""
    s = settings or OPEN
    states: Mapping[str, LadderState] = {}
    out: list[Decision] = []
    for k in range(int(hours * 12) + 1):
        now = T0 + timedelta(minutes=5 * k)
        fs = [_idle(now)]
        if extra is not None:
            fs.append(_health(extra, "GPU-0", JOB.id, now, XID79 if extra == "gpu-failed" else ""))
        res = decide(PolicyInput(now, fs, {JOB.id: JOB}, states, frozenset(), GPUS), s)
        states = {**{w: st for w, st in states.items() if w not in res.cleared}, **res.states}
        out.extend(res.decisions)
    return out


CASES = [
    # (health finding on one of the job's GPUs, highest level acted on, notices to its owner)
    (None, Level.FORCE, 2),  # the control: an idle job is warned twice, then stopped
    ("gpu-failed", Level.NOTIFY, 1),  # its idleness is the fault's: told once, never stopped
    ("gpu-degrading", Level.FORCE, 2),  # degrading is no excuse for idleness
    ("gpu-throttled", Level.FORCE, 2),
]


@pytest.mark.parametrize(("extra", "top", "notices"), CASES)
def test_a_failed_gpu_is_never_stopped_as_idle(extra: str | None, top: Level, notices: int) -> None:
    ds = _run(extra)
    acted = [d for d in ds if d.acts]
    assert max(d.level for d in acted) is top
    assert sum(d.level is Level.NOTIFY for d in acted) == notices
    if extra == "gpu-failed":
        (told,) = acted
        assert (told.rule, told.step) == ("gpu-failed", "advice")
        assert "Xid 79 (GPU has fallen off the bus)" in told.reason
        assert "drain the node, reboot; check power and seating" in told.reason
        assert "not its owner's" in told.reason
        later = [d for d in ds if not d.acts]
        assert later
        assert all(d.hold is Hold.GPU_FAULT for d in later)
        assert all(d.level < Level.GRACEFUL_STOP for d in ds)


def test_the_ladder_starts_afresh_once_the_gpu_is_repaired() -> None:
    s = OPEN
    states: Mapping[str, LadderState] = {}
    levels = []
    for k in range(60):  # 1 h failed, then the GPU is reset and the job still idles
        now = T0 + timedelta(minutes=5 * k)
        fs = [_idle(now)] + ([_health("gpu-failed", "GPU-0", JOB.id, now, XID79)] if k < 12 else [])
        res = decide(PolicyInput(now, fs, {JOB.id: JOB}, states, frozenset(), GPUS), s)
        states = {**{w: st for w, st in states.items() if w not in res.cleared}, **res.states}
        levels += [(k, d.step) for d in res.decisions if d.acts]
    assert levels[0] == (0, "advice")
    # After the repair, the idle job gets its own first warning, not an instant stop.
    assert levels[1] == (12, "warn-1")
    assert [s for k, s in levels if k >= 12][:3] == ["warn-1", "warn-2", "graceful-stop"]


def test_gpu_health_worst_wins_and_gpus_without_data_are_absent() -> None:
    fs = [
        _health("gpu-throttled", "GPU-0", "job-1", T0),
        _health("gpu-failed", "GPU-0", "job-1", T0),
        _health("gpu-degrading", "GPU-0", "job-1", T0),
        _health("gpu-throttled", "GPU-1", None, T0),
        _idle(T0),  # waste says nothing about health
    ]
    got = gpu_health(fs, with_data=["GPU-0", "GPU-1", "GPU-2"])
    assert got == {"GPU-0": Health.FAILED, "GPU-1": Health.THROTTLED, "GPU-2": Health.OK}


DRAINS = [
    # (settings, approvals on, nodes already out, expected drained nodes)
    (HealthSettings(), True, (), ["node0", "node1"]),
    (HealthSettings(), True, ("node1",), ["node0"]),  # someone else drained it already
    (HealthSettings(), False, (), []),  # no drain without a person
    (HealthSettings(require_approval=False), False, (), ["node0", "node1"]),
    (HealthSettings(drain_failed_nodes=False), True, (), []),
]


@pytest.mark.parametrize(("settings", "approvals", "out", "nodes"), DRAINS)
def test_plan_drains(
    settings: HealthSettings, approvals: bool, out: tuple[str, ...], nodes: list[str]
) -> None:
    fs = [
        _health("gpu-failed", "GPU-0", "job-1", T0, XID79),
        _health("gpu-failed", "GPU-3", None, T0, "node1/gpu1: no Xid; double-bit ECC errors now 2"),
        _health("gpu-degrading", "GPU-2", None, T0),  # a prediction drains nothing
    ]
    since = {"node0": T0 - timedelta(minutes=7)}
    ds = plan_drains(fs, GPUS, since, T0, settings, out, approvals_on=approvals)
    assert [d.workload_id for d in ds] == [f"node:{n}" for n in nodes]
    for d in ds:
        assert (d.level, d.step, d.rule, d.acts) == (Level.INFRA, DRAIN.name, "gpu-failed", True)
    if nodes[:1] == ["node0"]:
        d = ds[0]
        assert d.gpu_uuids == ("GPU-0", "GPU-1")
        assert d.idempotency_key == "node:node0:drain:20260302T085300Z"
        assert "Xid 79 (GPU has fallen off the bus)" in d.reason
