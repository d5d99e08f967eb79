from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpusteward.domain.models import (
    EXCLUDE_UNTIL_KEY,
    PROTECT_KEY,
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
from gpusteward.policy import (
    BudgetSettings,
    PolicyInput,
    PolicyResult,
    PolicySettings,
    ReserveSettings,
    decide,
)

T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)
STARTED = T0 - timedelta(hours=3)


def gpus(n: int = 16, pool: str = "default", price: float = 2.0, prefix: str = "GPU") -> dict[str, Gpu]:
    return {
        f"{prefix}-{i}": Gpu(f"{prefix}-{i}", f"node-{i // 8}", i % 8, "A100", 81920.0, price, pool)
        for i in range(n)
    }


def workload(
    wid: str,
    uuids: Sequence[str],
    *,
    user: str = "alice",
    started_at: datetime = STARTED,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Workload:
    owner = Owner(user, "nlp")
    return Workload(
        wid,
        WorkloadKind.JOB,
        wid,
        owner,
        len(uuids),
        tuple(uuids),
        started_at,
        labels=labels or {},
        annotations=annotations or {},
    )


def finding(
    wid: str | None,
    uuids: Sequence[str],
    *,
    rule: str = "idle-gpu",
    action: RuleAction = RuleAction.RECLAIM,
    cost: float = 1.0,
    at: datetime = T0,
) -> Finding:
    return Finding(rule, "idle", action, at, tuple(uuids), wid, {}, 45.0, cost / 2, cost, "idle")


def at_step(wid: str, step: str, w: Workload, *, minutes_ago: float = 60) -> LadderState:
    """A ladder whose next step is due now (its last step was taken ``minutes_ago``)."""
    taken = T0 - timedelta(minutes=minutes_ago)
    warned = taken if step == "warn-1" else taken - timedelta(minutes=15)
    return LadderState(wid, w.incarnation, "idle-gpu", warned, taken, step, taken, warned)


def run(
    workloads: Sequence[Workload],
    findings: Sequence[Finding],
    states: dict[str, LadderState] | None = None,
    settings: PolicySettings | None = None,
    *,
    gpu_map: dict[str, Gpu] | None = None,
    now: datetime = T0,
    paused: bool = False,
    recent_actions: int = 0,
    recent_action_gpus: int = 0,
) -> PolicyResult:
    inp = PolicyInput(
        now,
        findings,
        {w.id: w for w in workloads},
        states or {},
        frozenset(),
        gpu_map if gpu_map is not None else gpus(),
        paused,
        recent_actions,
        recent_action_gpus,
    )
    return decide(inp, settings or PolicySettings())


def by_id(result: PolicyResult) -> dict[str, Decision]:
    return {d.workload_id: d for d in result.decisions}


def test_pause_stops_everything_but_still_ends_ladders_of_gone_workloads() -> None:
    ws = [workload(f"w{i}", [f"GPU-{i}"]) for i in range(4)]
    states = {
        "w1": at_step("w1", "warn-1", ws[1]),
        "w2": at_step("w2", "warn-2", ws[2]),
        "w3": at_step("w3", "graceful-stop", ws[3]),
        "gone": at_step("gone", "warn-1", ws[0]),
    }
    findings = [finding(w.id, w.gpu_uuids) for w in ws]
    result = run(ws, findings, states, paused=True)
    d = by_id(result)
    assert not any(x.acts for x in result.decisions)
    assert {wid: x.hold for wid, x in d.items() if wid != "gone"} == dict.fromkeys(
        ["w0", "w1", "w2", "w3"], Hold.PAUSED
    )
    assert all(not x.idempotency_key for x in result.decisions)
    assert {wid: s.step for wid, s in result.states.items()} == {
        "w0": "",
        "w1": "warn-1",
        "w2": "warn-2",
        "w3": "graceful-stop",
    }
    assert result.cleared == {"gone"}
    # Unpaused, the same input acts.
    assert sum(x.acts for x in run(ws, findings, states).decisions) == 4


@pytest.mark.parametrize(
    ("kw", "settings"),
    [
        ({"annotations": {EXCLUDE_UNTIL_KEY: "2025-03-04T12:00:00Z"}}, PolicySettings()),
        ({"annotations": {EXCLUDE_UNTIL_KEY: "next week"}}, PolicySettings()),
    ],
)
def test_excluded_workloads_are_untouched(kw: dict[str, Any], settings: PolicySettings) -> None:
    w = workload("w", ["GPU-0"], **kw)
    states: dict[str, LadderState] = {"w": at_step("w", "warn-2", w)}
    for minute in range(0, 120, 5):
        now = T0 + timedelta(minutes=minute)
        result = run([w], [finding("w", ["GPU-0"], at=now)], states, settings, now=now)
        (d,) = result.decisions
        assert not d.acts
        assert d.hold is Hold.EXCLUDED
        assert "Nothing is done" in d.reason
        assert result.states == {}
        assert result.cleared == ({"w"} if states else set())
        states = {}


@pytest.mark.parametrize(
    ("kw", "settings"),
    [
        ({"labels": {PROTECT_KEY: "true"}}, PolicySettings()),
        ({"user": "vip"}, PolicySettings.model_validate({"protect": {"users": ["vip"]}})),
    ],
)
def test_protected_workloads_are_warned_and_never_stopped(
    kw: dict[str, Any], settings: PolicySettings
) -> None:
    """Protection stops actions, not information: both warnings go out, the stop is held."""
    w = workload("w", ["GPU-0"], **kw)
    states: dict[str, LadderState] = {}
    taken: list[str] = []
    for minute in range(0, 180, 5):
        now = T0 + timedelta(minutes=minute)
        result = run([w], [finding("w", ["GPU-0"], at=now)], states, settings, now=now)
        (d,) = result.decisions
        if d.acts:
            taken.append(d.step)
        elif d.level >= Level.GRACEFUL_STOP:
            assert d.hold is Hold.PROTECTED
            assert "never a stop" in d.reason
        states = {**states, **result.states}
    assert taken == ["warn-1", "warn-2"]


def test_an_expired_exclusion_starts_over_with_a_first_warning() -> None:
    w = workload("w", ["GPU-0"], annotations={EXCLUDE_UNTIL_KEY: "2025-03-04T08:00:00Z"})
    (d,) = run([w], [finding("w", ["GPU-0"])]).decisions
    assert (d.step, d.acts) == ("warn-1", True)


def test_budget_caps_the_number_of_stops_per_hour() -> None:
    ws = [workload(f"w{i}", [f"GPU-{i}"]) for i in range(5)]
    states = {w.id: at_step(w.id, "warn-2", w) for w in ws}
    findings = [finding(w.id, w.gpu_uuids, cost=float(i)) for i, w in enumerate(ws)]
    settings = PolicySettings(budget=BudgetSettings(max_actions_per_hour=3, max_gpu_share_per_hour=1.0))
    result = run(ws, findings, states, settings, recent_actions=1, recent_action_gpus=1)
    d = by_id(result)
    assert sorted(wid for wid, x in d.items() if x.acts) == ["w3", "w4"]
    assert {d[w].hold for w in ("w0", "w1", "w2")} == {Hold.BUDGET}
    assert all(d[w].level is Level.GRACEFUL_STOP and not d[w].idempotency_key for w in ("w0", "w1", "w2"))
    # A held step is not a taken step: those ladders stay where they were.
    assert {wid: s.step for wid, s in result.states.items()} == {
        "w0": "warn-2",
        "w1": "warn-2",
        "w2": "warn-2",
        "w3": "graceful-stop",
        "w4": "graceful-stop",
    }


def test_budget_caps_the_gpu_share_per_hour() -> None:
    big = workload("big", ["GPU-0", "GPU-1", "GPU-2"])
    small = workload("small", ["GPU-3"])
    other = workload("other", ["GPU-4", "GPU-5"])
    ws = [big, small, other]
    states = {w.id: at_step(w.id, "warn-2", w) for w in ws}
    findings = [
        finding("big", big.gpu_uuids, cost=9),
        finding("small", small.gpu_uuids, cost=1),
        finding("other", other.gpu_uuids, cost=5),
    ]
    # 16 GPUs at 25 %: 4 GPUs an hour. "big" (most waste) takes 3, "other" (2) no longer fits.
    d = by_id(run(ws, findings, states))
    assert (d["big"].acts, d["other"].hold, d["small"].acts) == (True, Hold.BUDGET, True)
    assert d["big"].gpu_uuids == ("GPU-0", "GPU-1", "GPU-2")


def test_the_gpu_share_counts_gpus_workloads_hold_that_no_node_lists() -> None:
    # 4 GPUs listed, 4 more held by the workloads only: 8 in all, 25 % of them is 2 an hour.
    listed = gpus(4)
    pair, other = workload("pair", ["GPU-0", "GPU-1"]), workload("other", ["X-0", "X-1", "X-2", "X-3"])
    states = {w.id: at_step(w.id, "warn-2", w) for w in (pair, other)}
    findings = [finding("pair", pair.gpu_uuids, cost=2)]
    d = by_id(run([pair, other], findings, states, gpu_map=listed))
    assert d["pair"].acts  # counted over the 4 listed alone, 25 % would be 1 GPU: held


def test_reserve_keeps_the_configured_share_of_each_pool_idle() -> None:
    gmap = {**gpus(8, "a", prefix="A"), **gpus(4, "b", prefix="B")}
    gmap["A-0"] = Gpu("A-0", "node-0", 0, "T4", 16384.0, 0.5, "a")
    gmap["A-1"] = Gpu("A-1", "node-0", 1, "T4", 16384.0, 0.6, "a")
    ws = [workload(f"a{i}", [f"A-{i}"]) for i in range(4)] + [workload(f"b{i}", [f"B-{i}"]) for i in range(3)]
    states = {w.id: at_step(w.id, "warn-2", w) for w in ws}
    findings = [finding(w.id, w.gpu_uuids) for w in ws]
    settings = PolicySettings(  # 2 GPUs of pool a, 1 of pool b; a budget that allows every stop
        reserve=ReserveSettings(share=0.25), budget=BudgetSettings(max_gpu_share_per_hour=1.0)
    )
    d = by_id(run(ws, findings, states, settings, gpu_map=gmap))
    held = sorted(wid for wid, x in d.items() if x.hold is Hold.RESERVE)
    assert held == ["a0", "a1", "b0"]
    assert sorted(wid for wid, x in d.items() if x.acts) == ["a2", "a3", "b1", "b2"]
    assert "reserve pool" in d["a0"].reason


def test_advice_never_goes_beyond_one_notice_per_episode() -> None:
    w = workload("w", ["GPU-0", "GPU-1"])
    states: dict[str, LadderState] = {}
    seen: list[Decision] = []
    for minute in range(0, 180, 5):
        now = T0 + timedelta(minutes=minute)
        f = finding("w", w.gpu_uuids, rule="oversized", action=RuleAction.ADVISE, cost=100, at=now)
        result = run([w], [f], states, now=now)
        states = {**states, **result.states}
        seen += result.decisions
    assert all(d.level <= Level.NOTIFY for d in seen)
    acting = [d for d in seen if d.acts]
    assert [(d.step, d.level) for d in acting] == [("advice", Level.NOTIFY)]
    assert {d.hold for d in seen[1:]} == {Hold.ADVICE_ONLY}


def test_the_most_wasteful_reclaim_finding_drives_the_ladder_over_advice() -> None:
    w = workload("w", ["GPU-0", "GPU-1"])
    findings = [
        finding("w", w.gpu_uuids, rule="oversized", action=RuleAction.ADVISE, cost=100),
        finding("w", w.gpu_uuids, rule="idle-gpu", cost=2),
        finding("w", w.gpu_uuids, rule="low-util", cost=3),
    ]
    (d,) = run([w], findings).decisions
    assert (d.rule, d.step, d.level) == ("low-util", "warn-1", Level.NOTIFY)


def test_decide_is_deterministic_keys_are_stable_and_inputs_untouched() -> None:
    ws = [workload(f"w{i}", [f"GPU-{i}"]) for i in range(6)]
    states = {
        w.id: at_step(w.id, step, w)
        for w, step in zip(ws[:3], ["warn-1", "warn-2", "graceful-stop"], strict=True)
    }
    findings = [finding(w.id, w.gpu_uuids, cost=float(i)) for i, w in enumerate(ws)]
    frozen_states, frozen_findings = copy.deepcopy(states), copy.deepcopy(findings)
    first = run(ws, findings, states)
    shuffled = list(findings)
    random.Random(7).shuffle(shuffled)
    second = run(list(reversed(ws)), shuffled, dict(reversed(states.items())))
    assert first == second
    assert (states, findings) == (frozen_states, frozen_findings)
    assert [d.workload_id for d in first.decisions] == sorted(d.workload_id for d in first.decisions)
    keys = {d.workload_id: d.idempotency_key for d in first.decisions}
    episode = int(states["w2"].first_seen_at.timestamp())
    assert keys["w2"] == f"w2:{ws[2].incarnation}:{episode}:force"
    assert keys["w5"] == f"w5:{ws[5].incarnation}:{int(T0.timestamp())}:warn-1"


def test_young_workloads_wait_for_their_startup_grace() -> None:
    w = workload("w", ["GPU-0"], started_at=T0 - timedelta(minutes=5))
    result = run([w], [finding("w", ["GPU-0"])])
    (d,) = result.decisions
    assert (d.hold, d.acts, d.step) == (Hold.STARTUP_GRACE, False, "warn-1")
    later = run([w], [finding("w", ["GPU-0"])], dict(result.states), now=T0 + timedelta(minutes=10))
    assert later.decisions[0].acts
    assert later.states["w"].first_seen_at == T0  # the episode began when the waste was first seen


def test_a_partly_busy_workload_gets_warnings_but_is_never_stopped() -> None:
    w = workload("w", ["GPU-0", "GPU-1"])
    (warn,) = run([w], [finding("w", ["GPU-0"])]).decisions
    assert warn.acts
    (stop,) = run([w], [finding("w", ["GPU-0"])], {"w": at_step("w", "warn-2", w)}).decisions
    assert (stop.hold, stop.acts, stop.level) == (Hold.PARTIAL, False, Level.GRACEFUL_STOP)


def test_unknown_workloads_keep_their_ladder_and_unowned_waste_is_ignored() -> None:
    w = workload("w", ["GPU-0"])
    states = {"w": at_step("w", "warn-2", w)}
    inp = PolicyInput(T0, [finding(None, ["GPU-9"])], {}, states, frozenset({"w"}), gpus())
    result = decide(inp, PolicySettings())
    (d,) = result.decisions
    assert (d.workload_id, d.hold, d.acts) == ("w", Hold.STALE, False)
    assert (result.states, result.cleared) == ({}, frozenset())


def test_settings_reject_unknown_keys_and_accept_level_names() -> None:
    with pytest.raises(ValueError, match="extra"):
        PolicySettings.model_validate({"ladder": {"warn_again_minutes": 5}})
    assert PolicySettings.model_validate({"max_level": "graceful-stop"}).max_level is Level.GRACEFUL_STOP
    assert PolicySettings.model_validate({"max_level": 1}).max_level is Level.NOTIFY
    with pytest.raises(ValueError, match="max_level"):
        PolicySettings.model_validate({"max_level": "L9"})
