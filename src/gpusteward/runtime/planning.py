"""The plan phase's ladder part, for the leader: findings into episodes, ladders into decisions.

``plan_ladders`` reads what policy needs (ladders, pause, the last hour's stops, snoozes and
approvals), records the findings' episodes and lets ``policy.decide`` (pure) choose;
``save_ladders`` stores the ladders after the act phase, without any step the runner did not
take. Episodes that begin are stored before acting: their ``first_seen_at`` names the steps'
idempotency keys, so a crash or a failed save after acting re-emits the same keys (whose action
rows say "done") and never a new episode's.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from gpusteward.analysis.engine import AnalysisResult
from gpusteward.domain.models import Decision, Gpu, Hold, LadderState, Level, Workload
from gpusteward.domain.queue import Queue
from gpusteward.domain.store_ports import Controls, LadderStore, TickStore
from gpusteward.policy import PolicyInput, PolicySettings, decide
from gpusteward.policy.decide import PolicyResult
from gpusteward.policy.owner import ApprovalView, SnoozeView
from gpusteward.policy.scope_settings import Stage
from gpusteward.runtime.runner import ActionResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LadderPlan:
    result: PolicyResult
    #: The ladders as stored before this tick.
    states: Mapping[str, LadderState]
    paused: bool
    #: By idempotency key; None when nothing waits for approval (dry-run, or approvals off).
    approvals: Mapping[str, ApprovalView] | None


def plan_ladders(
    store: TickStore,
    policy: PolicySettings,
    now: datetime,
    analysis: AnalysisResult,
    workloads: Mapping[str, Workload],
    gpus: Mapping[str, Gpu],
    *,
    dry_run: bool,
    unsnoozable_rules: frozenset[str],
    also: Collection[str] = (),
    stages: Mapping[str, Stage] | None = None,
    slowed: Mapping[str, float] | None = None,
    queue: Queue | None = None,
) -> LadderPlan:
    """The ladder decisions of this tick; ``also`` names more workloads whose approvals are read
    (the nodes and pools the L4 plans name)."""
    store.record_findings(analysis.findings, now)
    found = {(f.workload_id, f.rule) for f in analysis.findings}
    # An episode ends only on evidence: its rule judged the workload and did not trip, or
    # the workload is gone. A restart's empty window or a stale GPU ends nothing.
    store.close_findings(
        [
            (wid, rule)
            for wid, rule in store.open_episode_keys()
            if (wid, rule) not in found
            and (
                wid not in workloads
                or (wid not in analysis.unknown_workloads and wid not in analysis.unjudged.get(rule, ()))
            )
        ],
        now,
    )
    paused = store.is_paused()
    recent, recent_gpus = store.count_actions_since(
        now - timedelta(hours=1), min_level=Level.GRACEFUL_STOP, dry_run=dry_run
    )
    states = store.load_ladders(dry_run)
    ids = set(states) | {f.workload_id for f in analysis.findings if f.workload_id} | set(also)
    approvals, snoozes = owner_controls(store, policy, now, ids, dry_run=dry_run)
    result = decide(
        PolicyInput(
            now=now,
            findings=analysis.findings,
            workloads=workloads,
            states=states,
            unknown_workloads=analysis.unknown_workloads,
            unjudged=analysis.unjudged,
            gpus=gpus,
            paused=paused,
            recent_actions=recent,
            recent_action_gpus=recent_gpus,
            approvals=approvals,
            snoozes=snoozes,
            unsnoozable_rules=unsnoozable_rules,
            stages=stages or {},
            slowed=slowed or {},
            queue=queue,
        ),
        policy,
    )
    begun = [_untaken(s, None) for w, s in result.states.items() if _episode(states.get(w)) != _episode(s)]
    if begun:
        store.update_ladders(begun, (), dry_run=dry_run)
    return LadderPlan(result, states, paused, approvals)


def owner_controls(
    store: Controls, policy: PolicySettings, now: datetime, ids: Collection[str], *, dry_run: bool
) -> tuple[Mapping[str, ApprovalView] | None, Mapping[str, SnoozeView]]:
    snoozes = {w: SnoozeView(s.until, s.by, s.reason) for w, s in store.active_snoozes(now).items()}
    if dry_run or policy.approval.min_level is None:
        return None, snoozes
    store.expire_approvals(now)
    found = store.latest_approvals(ids, dry_run=False)
    approvals = {
        key: ApprovalView(r.id, r.status, r.expires_at, r.decided_by, r.decision_reason, n)
        for key, (r, n) in found.items()
    }
    return approvals, snoozes


def save_ladders(
    store: LadderStore, plan: LadderPlan, actions: Sequence[ActionResult], *, dry_run: bool
) -> None:
    """Store the ladders after acting, each without a step the runner held (its approval lapsed
    meanwhile): a crash before this re-emits the same step under the same key."""
    held = {a.decision.workload_id for a in actions if a.hold is not Hold.NONE}
    states = plan.states
    saved = [_untaken(s, states.get(w)) if w in held else s for w, s in plan.result.states.items()]
    store.update_ladders(saved, plan.result.cleared, dry_run=dry_run)


def with_runner_holds(decisions: Sequence[Decision], actions: Sequence[ActionResult]) -> tuple[Decision, ...]:
    """The decisions as carried out: one the runner held says so."""
    held = {a.decision.idempotency_key: a for a in actions if a.hold is not Hold.NONE}
    return tuple(
        replace(d, hold=h.hold, reason=f"{d.reason} {h.detail}.")
        if d.acts and (h := held.get(d.idempotency_key)) is not None
        else d
        for d in decisions
    )


def _episode(state: LadderState | None) -> tuple[str, datetime] | None:
    """What names a ladder's episode in its idempotency keys."""
    return None if state is None else (state.incarnation, state.first_seen_at)


def _untaken(state: LadderState, prev: LadderState | None) -> LadderState:
    """``state`` without the step that the runner did not take (its approval lapsed meanwhile)."""
    if prev is None:
        return replace(state, step="", step_at=None, first_warned_at=None)
    return replace(state, step=prev.step, step_at=prev.step_at, first_warned_at=prev.first_warned_at)


def rebase_ladders(store: TickStore, jump_s: float, now: datetime, *, dry_run: bool) -> None:
    """Move the ladders' step times with a wall-clock step so no step fires early (or late).
    ``first_seen_at`` stays: it names the episode in idempotency keys."""
    shift = timedelta(seconds=jump_s)

    def moved(at: datetime | None) -> datetime | None:
        return None if at is None else at + shift

    states = store.load_ladders(dry_run)
    rebased = [
        replace(
            s,
            step_at=moved(s.step_at),
            first_warned_at=moved(s.first_warned_at),
            clean_since=moved(s.clean_since),
        )
        for s in states.values()
    ]
    store.update_ladders(rebased, (), dry_run=dry_run)
    log.warning("wall clock stepped by %+.0f s; %d ladder(s) shifted with it", jump_s, len(rebased))
    store.audit("clock.step", now, None, seconds=round(jump_s, 3), ladders=len(rebased))
