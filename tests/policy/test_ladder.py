"""The escalation ladder, driven minute by minute through ``decide`` with an injected clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.models import (
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
from gpusteward.policy import LadderSettings, PolicyInput, PolicyResult, PolicySettings, decide
from gpusteward.policy import ladder as lad
from gpusteward.store.db import StateStore

T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)
GPUS = {f"GPU-{i}": Gpu(f"GPU-{i}", "node-a", i, "A100", 81920.0, price_per_hour=2.0) for i in range(4)}


def workload(started: datetime = T0 - timedelta(hours=3)) -> Workload:
    return Workload("job-1", WorkloadKind.JOB, "train", Owner("alice", "nlp"), 1, ("GPU-0",), started)


def finding(at: datetime, rule: str = "idle-gpu") -> Finding:
    return Finding(rule, "idle", RuleAction.RECLAIM, at, ("GPU-0",), "job-1", {}, 30.0, 0.5, 1.0)


def apply(states: Mapping[str, LadderState], result: PolicyResult) -> dict[str, LadderState]:
    """What the runtime does with a result: drop the cleared ladders, save the new ones."""
    out = {k: v for k, v in states.items() if k not in result.cleared}
    out.update(result.states)
    return out


def drive(
    minutes: int, make: Callable[[int, Mapping[str, LadderState]], PolicyInput], settings: PolicySettings
) -> tuple[list[tuple[str, int]], list[PolicyResult]]:
    """Run one tick a minute; return each acting step with its minute (and every result)."""
    states: dict[str, LadderState] = {}
    fired: list[tuple[str, int]] = []
    results = []
    for m in range(minutes):
        result = decide(make(m, states), settings)
        fired += [(d.step, m) for d in result.decisions if d.acts]
        states = apply(states, result)
        results.append(result)
    return fired, results


def steady(m: int, states: Mapping[str, LadderState]) -> PolicyInput:
    now = T0 + timedelta(minutes=m)
    return PolicyInput(now, [finding(now)], {"job-1": workload()}, states, frozenset(), GPUS)


@pytest.mark.parametrize(
    ("ladder", "expected"),
    [
        (LadderSettings(), [("warn-1", 0), ("warn-2", 15), ("graceful-stop", 30), ("force", 40)]),
        (
            LadderSettings(warn_again_after_minutes=5, graceful_stop_after_minutes=20, force_after_minutes=3),
            [("warn-1", 0), ("warn-2", 5), ("graceful-stop", 20), ("force", 23)],
        ),
        # No room for a second warning: it is skipped, never sent after the stop.
        (LadderSettings(warn_again_after_minutes=30), [("warn-1", 0), ("graceful-stop", 30), ("force", 40)]),
        # One step per tick, even when the next one is due at once.
        (
            LadderSettings(force_after_minutes=0),
            [("warn-1", 0), ("warn-2", 15), ("graceful-stop", 30), ("force", 31)],
        ),
    ],
)
def test_each_step_fires_at_its_minute_and_not_a_minute_early(
    ladder: LadderSettings, expected: list[tuple[str, int]]
) -> None:
    fired, results = drive(60, steady, PolicySettings(ladder=ladder))
    assert fired == expected
    levels = {d.step: d.level for r in results for d in r.decisions if d.acts}
    keys = [d.idempotency_key for r in results for d in r.decisions if d.acts]
    assert len(set(keys)) == len(keys)
    assert levels.get("graceful-stop") == Level.GRACEFUL_STOP
    assert levels.get("force") == Level.FORCE
    assert levels["warn-1"] == Level.NOTIFY


def test_between_steps_the_decision_waits_and_says_when_next() -> None:
    _, results = drive(9, steady, PolicySettings())
    d = results[8].decisions[0]
    assert (d.level, d.hold, d.step, d.idempotency_key) == (Level.NONE, Hold.WAITING, "", "")
    assert "second warning (warn-2) in 7 min, at 09:15 UTC" in d.reason
    assert "idle-gpu" in d.reason
    assert "node-a/gpu0" in d.reason
    first = results[0].decisions[0]
    assert "graceful stop (graceful-stop) in 30 min" in first.reason


def test_max_level_caps_the_ladder() -> None:
    fired, results = drive(60, steady, PolicySettings(max_level="L1"))
    assert fired == [("warn-1", 0), ("warn-2", 15)]
    last = results[-1].decisions[0]
    assert (last.level, last.hold) == (Level.NONE, Hold.WAITING)
    assert "at most L1" in last.reason


def test_a_short_gap_in_the_finding_does_not_clear_the_ladder() -> None:
    def gap(m: int, states: Mapping[str, LadderState]) -> PolicyInput:
        now = T0 + timedelta(minutes=m)
        findings = [] if m in (20, 21) else [finding(now)]
        return PolicyInput(now, findings, {"job-1": workload()}, states, frozenset(), GPUS)

    fired, results = drive(40, gap, PolicySettings())
    assert results[20].cleared == frozenset()
    assert results[20].decisions[0].hold is Hold.WAITING
    assert "No waste seen since" in results[20].decisions[0].reason
    assert results[21].states == {}  # unchanged: still clean since minute 20
    assert fired == [("warn-1", 0), ("warn-2", 15), ("graceful-stop", 30)]


def test_waste_gone_for_clear_after_minutes_clears_and_a_new_episode_starts_over() -> None:
    def gap(m: int, states: Mapping[str, LadderState]) -> PolicyInput:
        now = T0 + timedelta(minutes=m)
        findings = [] if 20 <= m < 31 else [finding(now)]
        return PolicyInput(now, findings, {"job-1": workload()}, states, frozenset(), GPUS)

    fired, results = drive(50, gap, PolicySettings())
    assert all(r.cleared == frozenset() for r in results[20:30])
    assert results[30].cleared == {"job-1"}  # 10 minutes (clear_after_minutes) without waste
    assert results[30].states == {}
    assert "ladder is reset" in results[30].decisions[0].reason
    # The second episode gets its own warnings, under new idempotency keys.
    keys = [d.idempotency_key for r in results for d in r.decisions if d.acts]
    assert len(set(keys)) == 4
    assert fired == [("warn-1", 0), ("warn-2", 15), ("warn-1", 31), ("warn-2", 46)]


def test_stale_data_holds_the_ladder_without_clearing_it() -> None:
    def outage(m: int, states: Mapping[str, LadderState]) -> PolicyInput:
        now = T0 + timedelta(minutes=m)
        stale = 10 <= m < 40
        findings = [] if stale else [finding(now)]
        unknown = frozenset({"job-1"}) if stale else frozenset()
        return PolicyInput(now, findings, {"job-1": workload()}, states, unknown, GPUS)

    fired, results = drive(60, outage, PolicySettings())
    for r in results[10:40]:
        assert r.cleared == frozenset()
        assert r.states == {}
        assert r.decisions[0].hold is Hold.STALE
        assert "no fresh data: nothing is done" in r.decisions[0].reason.lower()
    # warn-2 was due at 15 but waits for fresh data; the graceful stop keeps its 15-minute notice.
    assert fired == [("warn-1", 0), ("warn-2", 40), ("graceful-stop", 55)]


def test_a_restart_of_gpusteward_continues_the_ladder_from_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = StateStore(url)
    store.create_schema()
    fired: list[tuple[str, int]] = []
    settings = PolicySettings()
    for m in range(45):
        if m == 20:  # the agent restarts: a new store object on the same file
            store.close()
            store = StateStore(url)
        result = decide(steady(m, store.load_ladders(dry_run=False)), settings)
        fired += [(d.step, m) for d in result.decisions if d.acts]
        store.update_ladders(result.states.values(), result.cleared, dry_run=False)
    store.close()
    assert fired == [("warn-1", 0), ("warn-2", 15), ("graceful-stop", 30), ("force", 40)]


def test_a_new_incarnation_starts_a_fresh_ladder() -> None:
    restarted = workload(started=T0 + timedelta(minutes=1) - timedelta(hours=1))

    def requeue(m: int, states: Mapping[str, LadderState]) -> PolicyInput:
        now = T0 + timedelta(minutes=m)
        w = workload() if m < 20 else restarted
        return PolicyInput(now, [finding(now)], {"job-1": w}, states, frozenset(), GPUS)

    fired, results = drive(40, requeue, PolicySettings())
    assert fired == [("warn-1", 0), ("warn-2", 15), ("warn-1", 20), ("warn-2", 35)]
    new = results[20].states["job-1"]
    assert (new.incarnation, new.step) == (restarted.incarnation, "warn-1")
    assert results[20].decisions[0].idempotency_key.startswith(f"job-1:{restarted.incarnation}:")


def test_workload_gone_clears_its_ladder() -> None:
    def ends(m: int, states: Mapping[str, LadderState]) -> PolicyInput:
        now = T0 + timedelta(minutes=m)
        running = {"job-1": workload()} if m < 5 else {}
        return PolicyInput(now, [finding(now)] if m < 5 else [], running, states, frozenset(), GPUS)

    _, results = drive(7, ends, PolicySettings())
    assert results[5].cleared == {"job-1"}
    assert "no longer running" in results[5].decisions[0].reason
    assert results[6].decisions == ()


@pytest.mark.parametrize(
    ("step", "advice", "expected"),
    [
        ("", False, ("warn-1", 0)),
        ("warn-1", False, ("warn-2", 15)),
        ("warn-2", False, ("graceful-stop", 30)),
        ("graceful-stop", False, ("force", 40)),
        ("force", False, None),
        ("", True, ("advice", 0)),
        ("advice", True, None),
    ],
)
def test_next_step_table(step: str, advice: bool, expected: tuple[str, int] | None) -> None:
    at = {"": None, "warn-1": 0, "warn-2": 15, "graceful-stop": 30, "force": 40, "advice": 0}[step]
    state = LadderState(
        "job-1",
        "1",
        "r",
        T0,
        T0,
        step,
        None if at is None else T0 + timedelta(minutes=at),
        T0 if step else None,
    )
    nxt = lad.next_step(state, LadderSettings(), advice=advice)
    got = None if nxt is None else (nxt[0].name, int((nxt[1] - T0).total_seconds() // 60))
    assert got == expected


def test_when_rounds_minutes_up() -> None:
    assert lad.when(T0 + timedelta(minutes=6, seconds=1), T0) == "in 7 min, at 09:07 UTC"
    assert lad.when(T0 + timedelta(minutes=6), T0 + timedelta(seconds=30)) == "in 6 min, at 09:06 UTC"
    assert lad.when(T0 + timedelta(days=1), T0) == "in 1440 min, at 09:00 UTC on 2025-03-05"


def test_observe_keeps_every_other_field_as_replace_would() -> None:
    # observe() builds the state field by field (for speed): a field added to LadderState must be
    # added there too, or this fails.
    t = T0
    values: dict[str, object] = {
        "workload_id": "w",
        "incarnation": "7",
        "rule": "idle",
        "first_seen_at": t,
        "last_seen_at": t + timedelta(minutes=1),
        "step": "warn-1",
        "step_at": t + timedelta(minutes=2),
        "first_warned_at": t + timedelta(minutes=3),
        "clean_since": t + timedelta(minutes=4),
    }
    assert [f.name for f in fields(LadderState)] == list(values)
    state = LadderState(**values)  # type: ignore[arg-type]
    now = t + timedelta(minutes=9)
    expected = replace(state, rule="zombie", last_seen_at=now, clean_since=None)
    assert lad.observe(state, "zombie", now) == expected
