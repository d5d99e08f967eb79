"""The roll-out in the tick: scope stages and slowdowns into the plan, and, in the record phase
(leader only), the live safety figures: stops, suspected false kills, reclaim success.

A suspected false kill is found from what the source reports: a running workload with the
signature of one stopped within the horizon that started after the stop (a resubmitted Slurm
job, a Deployment scaled back up or restored, the same command line again), or an appeal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from gpusteward.domain.classes import workload_class
from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import ActionStatus, Decision, Gpu, Hold, Level, Notice, Workload, WorkloadKind
from gpusteward.domain.store_ports import Docs, NoticeLog
from gpusteward.policy import ladder
from gpusteward.policy import rollout as ro
from gpusteward.policy.scope_settings import Stage
from gpusteward.policy.scopes import scope_for
from gpusteward.policy.settings import PolicySettings
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.runtime.runner import ActionResult, ActionRunner

log = logging.getLogger(__name__)
_STOPS = frozenset({ladder.GRACEFUL_STOP.name, ladder.FORCE.name})


class RolloutStep:
    def __init__(self, store: Docs, policy: PolicySettings) -> None:
        self.book = RolloutBook(store, policy)
        self.policy = policy
        self.stages: dict[str, Stage] = {}
        self.slowed: dict[str, float] = {}
        #: Workload → (step, hold) of its decision last tick: a new one is a new finding.
        self._last: dict[str, tuple[str, Hold]] = {}

    def inputs(self) -> dict[str, Any]:
        """``plan_ladders``' stages and slowed scopes, read once per tick before planning."""
        self.stages, self.slowed = self.book.inputs()
        return {"stages": self.stages, "slowed": self.slowed}

    def record(
        self,
        now: datetime,
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        decisions: Sequence[Decision],
        actions: Sequence[ActionResult],
        runner: ActionRunner,
    ) -> list[ro.FalseKill]:
        """The leader's record of this tick; returns the false kills found now. After the actions:
        a store failure here is logged and the figures catch up next tick."""
        try:
            return self._record(now, workloads, gpus, decisions, actions, runner)
        except StoreError:
            log.exception("roll-out figures not written")
            return []

    def _record(
        self,
        now: datetime,
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        decisions: Sequence[Decision],
        actions: Sequence[ActionResult],
        runner: ActionRunner,
    ) -> list[ro.FalseKill]:
        self.book.note_config(now)
        watch = self.book.watch()
        read = ro.to_json(watch)  # before this tick's changes, which are made in place
        self._count(watch, workloads, gpus, decisions)
        if not runner.dry_run:
            self._stops(watch, now, workloads, gpus, actions, runner)
        horizon = timedelta(hours=self.policy.rollout.false_kill_horizon_hours)
        found = []
        for stop, why in ro.match(watch.stops, workloads.values(), self.book.appeals(), now, horizon):
            fk = watch.suspect(stop, why, now)
            found.append(fk)
            log.warning("suspected false kill %d: %s (%s) %s", fk.id, fk.workload_id, fk.scope, why)
            _tell_admins(runner, fk, self.policy.rollout.false_kill_slowdown)
        watch.stops = [s for s in watch.stops if now - s.at <= horizon]
        self.book.save_watch(watch, now, read=read)
        return found

    def _count(
        self,
        watch: ro.Watch,
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        decisions: Sequence[Decision],
    ) -> None:
        last, self._last = self._last, {}
        for d in decisions:
            w = workloads.get(d.workload_id)
            if w is None or not d.rule or w.kind in (WorkloadKind.NODE, WorkloadKind.POOL):
                continue
            self._last[d.workload_id] = (d.step, d.hold)
            before = last.get(d.workload_id)
            new, would = before is None, d.hold is Hold.SCOPE and before != (d.step, d.hold)
            if not (new or would):  # as counted last tick (nearly every finding): no scope to find
                continue
            scope = scope_for(w, gpus, self.policy, self.stages, self.slowed)
            if new:
                watch.count(scope.name, scope.stage, finding=True)
            if would:
                watch.count(scope.name, scope.stage, would=d.step)

    def _stops(
        self,
        watch: ro.Watch,
        now: datetime,
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        actions: Sequence[ActionResult],
        runner: ActionRunner,
    ) -> None:
        stopped = {s.workload_id for s in watch.stops}
        for a in actions:
            d, w = a.decision, workloads.get(a.decision.workload_id)
            if w is None or d.level < Level.GRACEFUL_STOP:
                continue
            if a.status in (ActionStatus.SUCCEEDED, ActionStatus.FAILED):
                executor = runner.executor_for(w, d.level)
                tally = watch.reclaim.setdefault(type(executor).__name__ if executor else "none", [0, 0])
                tally[0] += 1
                tally[1] += a.status is ActionStatus.SUCCEEDED and "(verified)" in a.detail
            began = a.status in (ActionStatus.SUCCEEDED, ActionStatus.EXECUTING)
            if began and d.step in _STOPS and d.workload_id not in stopped:
                scope = scope_for(w, gpus, self.policy, self.stages, self.slowed)
                cls = workload_class(w)
                watch.stops.append(
                    ro.StopRecord(w.id, now, ro.signature(w), scope.name, d.rule, cls, w.owner.user)
                )
                stopped.add(w.id)


def _tell_admins(runner: ActionRunner, fk: ro.FalseKill, slowdown: float) -> None:
    body = (
        f"{fk.workload_id} (scope {fk.scope}, rule {fk.rule}, class {fk.cls}) was stopped at "
        f"{fk.stopped_at:%Y-%m-%d %H:%M} UTC and {fk.why}.\n\n"
        f"Until this is settled, scope {fk.scope}'s ladder runs {slowdown:g}x slower.\n"
        f"Confirm: gpusteward rollout false-kills confirm {fk.id}\n"
        f"Dismiss: gpusteward rollout false-kills dismiss {fk.id} --reason '...'"
    )
    notice = Notice(
        fk.found_at,
        fk.workload_id,
        None,
        f"Suspected false kill ({fk.id}): {fk.workload_id}",
        body,
        Level.NOTIFY,
        f"false-kill:{fk.id}",
    )
    store: NoticeLog = runner.store
    store.record_notice(notice, sent=runner.deliver(notice))
