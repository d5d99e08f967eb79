"""Settling actions a crashed agent left ``planned`` or ``executing``: each outcome, never twice."""

from __future__ import annotations

from gpusteward.domain.models import ActionStatus, Level
from gpusteward.notify.templates import notice_for
from gpusteward.runtime.reconcile import Judgement, Reconciler

from .test_runner import T0, Recorder, decision, runner, workload


def left(store, wid, *, level=Level.GRACEFUL_STOP, step="graceful-stop", started=True):
    """An action as a crash leaves it: planned, or started and never finished."""
    action = store.plan_action(decision(wid, level, step), dry_run=False, at=T0)
    return store.start_action(action.id, T0) if started else action


def test_each_unfinished_action_is_settled_by_what_is_true_now(store):
    ex = Recorder()
    r, _ = runner(store, ex)
    ws = {w: workload(w) for w in ("done", "wasting", "busy", "unjudged", "planned-wasting")}
    ex.executed.append("done")  # its stop took effect before the crash
    left(store, "done")
    left(store, "gone")  # not running any more
    left(store, "wasting")
    left(store, "busy")
    left(store, "unjudged")
    left(store, "planned-wasting", started=False)
    left(store, "planned-gone", started=False)
    rec = Reconciler(r)
    orphans = rec.unfinished()
    assert len(orphans) == 7
    judged = {"done", "wasting", "busy", "planned-wasting"}
    done, rest = rec.settle(orphans, Judgement(ws, {"wasting", "planned-wasting"}, judged))
    outcome = {a.workload_id: a.status for a in store.actions(limit=100)}
    assert outcome == {
        "done": ActionStatus.SUCCEEDED,
        "gone": ActionStatus.SUCCEEDED,
        "wasting": ActionStatus.SUCCEEDED,
        "busy": ActionStatus.FAILED,
        "unjudged": ActionStatus.EXECUTING,
        "planned-wasting": ActionStatus.SUCCEEDED,
        "planned-gone": ActionStatus.SKIPPED,
    }
    # Only the two still wasting were executed (each once); the one already done was not redone.
    assert sorted(ex.executed) == ["done", "planned-wasting", "wasting"]
    assert [a.workload_id for a in rest] == ["unjudged"]
    assert {x.decision.workload_id for x in done} == set(outcome) - {"unjudged"}
    attempts = {a.workload_id: a.attempts for a in store.actions(limit=100)}
    assert (attempts["wasting"], attempts["planned-wasting"]) == (2, 1)
    # Later, with fresh data on it, the last one is settled too.
    done, rest = rec.settle(rest, Judgement(ws, set(), {"unjudged"}))
    assert rest == []
    assert [x.status for x in done] == [ActionStatus.FAILED]


def test_a_notice_recorded_as_sent_is_not_sent_again(store):
    r, notifier = runner(store, Recorder())
    w = workload("w")
    sent = left(store, "w", level=Level.NOTIFY, step="warn-1")
    store.record_notice(notice_for(decision("w", Level.NOTIFY, "warn-1"), w, dry_run=False), sent=True)
    unsent = left(store, "v", level=Level.NOTIFY, step="warn-1")
    rec = Reconciler(r)
    rec.settle(rec.unfinished(), Judgement({"w": w, "v": workload("v")}, {"w", "v"}, {"w", "v"}))
    assert store.actions(limit=10, workload_id="w")[0].status is ActionStatus.SUCCEEDED
    assert [n.workload_id for n in notifier.sent] == ["v"]  # only the unsent one goes out
    assert sent.id != unsent.id


def test_dry_run_leftovers_are_closed_as_skipped(store):
    r, _ = runner(store, Recorder(), dry_run=True)
    store.plan_action(decision("w"), dry_run=True, at=T0)
    rec = Reconciler(r)
    done, rest = rec.settle(rec.unfinished(), Judgement({}, set(), set()))
    assert [x.status for x in done] == [ActionStatus.SKIPPED]
    assert rest == []
