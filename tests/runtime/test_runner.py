"""The action runner: record first, pre-flight, execute, verify, and never let one failure stop the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import (
    ActionStatus,
    Decision,
    Level,
    Outcome,
    Owner,
    Workload,
    WorkloadKind,
)
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.runner import ActionRunner
from gpusteward.store.db import StateStore

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def workload(wid: str, started: datetime = T0 - timedelta(hours=2)) -> Workload:
    return Workload(wid, WorkloadKind.PROCESS, wid, Owner("alice", "nlp"), 1, (f"GPU-{wid}",), started)


def decision(wid: str, level: Level = Level.GRACEFUL_STOP, step: str = "graceful-stop") -> Decision:
    return Decision(
        workload_id=wid,
        at=T0,
        level=level,
        step=step,
        reason="idle for 60 min",
        rule="idle-allocation",
        gpu_uuids=(f"GPU-{wid}",),
        idempotency_key=f"{wid}:1:{step}",
    )


class Recorder:
    """An executor that records calls; some workloads make it fail or crash."""

    name = "recorder"

    def __init__(self, *, crash: set[str] | None = None, fail: set[str] | None = None) -> None:
        self.crash, self.fail, self.gone = crash or set(), fail or set(), set[str]()
        self.executed: list[str] = []
        self.restarted: dict[str, Workload] = {}

    def supports(self, workload: Workload, level: Level) -> bool:
        return level in (Level.GRACEFUL_STOP, Level.FORCE)

    def current(self, workload: Workload) -> Workload | None:
        if workload.id in self.gone:
            return None
        return self.restarted.get(workload.id, workload)

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        if workload.id in self.crash:
            raise RuntimeError("driver bug")
        if workload.id in self.fail:
            raise ExecutionError("permission denied")
        self.executed.append(workload.id)
        return Outcome(True, f"stopped {workload.id}", verified=True, released_gpu_uuids=workload.gpu_uuids)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        return workload.id in self.executed


@pytest.fixture
def store(tmp_path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s


def runner(
    store: StateStore, executor: Recorder, *, dry_run: bool = False
) -> tuple[ActionRunner, MemoryNotifier]:
    notifier = MemoryNotifier()
    return ActionRunner(store, [executor], notifier, SimClock(T0), dry_run=dry_run), notifier


def test_one_crashing_or_failing_workload_does_not_stop_the_others(store):
    ex = Recorder(crash={"a"}, fail={"b"})
    r, _ = runner(store, ex)
    ws = {w: workload(w) for w in "abc"}
    results = r.run([decision(w) for w in "abc"], ws)
    assert [(x.decision.workload_id, x.status) for x in results] == [
        ("a", ActionStatus.FAILED),
        ("b", ActionStatus.FAILED),
        ("c", ActionStatus.SUCCEEDED),
    ]
    assert "executor crashed: RuntimeError" in results[0].detail
    assert ex.executed == ["c"]
    assert {a.workload_id: a.status for a in store.actions()} == {
        "a": ActionStatus.FAILED,
        "b": ActionStatus.FAILED,
        "c": ActionStatus.SUCCEEDED,
    }


def test_a_step_that_ran_never_runs_again(store):
    ex = Recorder()
    r, notifier = runner(store, ex)
    ws = {"a": workload("a")}
    assert len(r.run([decision("a")], ws)) == 1
    assert r.run([decision("a")], ws) == []
    assert ex.executed == ["a"]
    assert len(store.actions()) == 1
    assert len(notifier.sent) == 1  # the owner hears about the stop once


def test_dry_run_records_and_touches_nothing(store):
    ex = Recorder()
    r, notifier = runner(store, ex, dry_run=True)
    results = r.run([decision("a", Level.NOTIFY, "warn-1"), decision("b")], {w: workload(w) for w in "ab"})
    assert [x.status for x in results] == [ActionStatus.SKIPPED, ActionStatus.SKIPPED]
    assert ex.executed == []
    assert notifier.sent == []
    assert all(a.dry_run for a in store.actions())
    # The notice that would have gone out is kept, marked unsent.
    assert [(n.notice.workload_id, n.sent) for n in store.notices()] == [("a", False)]


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (lambda ex, store: ex.gone.add("a"), "workload is gone"),
        (lambda ex, store: ex.restarted.update(a=workload("a", T0)), "different incarnation"),
        (lambda ex, store: store.set_paused(True, by="t", reason="r", at=T0), "paused"),
    ],
)
def test_preflight_refuses_when_the_world_changed(store, setup, words):
    ex = Recorder()
    r, notifier = runner(store, ex)
    setup(ex, store)
    (result,) = r.run([decision("a")], {"a": workload("a")})
    assert result.status is ActionStatus.SKIPPED
    assert words in result.detail
    assert ex.executed == []
    assert notifier.sent == []


def test_preflight_refuses_when_the_gpus_changed(store):
    ex = Recorder()
    moved = Workload(
        "a", WorkloadKind.PROCESS, "a", Owner("alice"), 1, ("GPU-other",), T0 - timedelta(hours=2)
    )
    ex.restarted["a"] = moved
    r, _ = runner(store, ex)
    (result,) = r.run([decision("a")], {"a": workload("a")})
    assert result.status is ActionStatus.SKIPPED
    assert "no longer holds the GPUs" in result.detail


def test_no_executor_for_the_level_is_a_recorded_failure(store):
    r, _ = runner(store, Recorder())
    (result,) = r.run([decision("a", Level.INFRA, "cordon")], {"a": workload("a")})
    assert result.status is ActionStatus.FAILED
    assert "no executor" in result.detail


def test_failed_action_is_retried_only_after_its_backoff(store):
    ex = Recorder(fail={"a"})
    r, _ = runner(store, ex)
    ws = {"a": workload("a")}
    r.run([decision("a")], ws)
    ex.fail.clear()
    assert r.retry(T0, ws, wasting={"a"}) == []  # backoff not over
    later = T0 + timedelta(minutes=5)
    r.clock.set(later)  # type: ignore[attr-defined]
    assert r.retry(later, ws, wasting=set()) == []  # waste gone: no retry
    (result,) = r.retry(later, ws, wasting={"a"})
    assert result.status is ActionStatus.SUCCEEDED
    (action,) = store.actions()
    assert action.attempts == 2
    assert action.status is ActionStatus.SUCCEEDED
