"""Spot interruptions in the tick (issue 18): the cloud is taking a node's instance, so every
workload on that node gets its checkpoint signal at once, its owner is told, and (in enforce)
what a scheduler can restart elsewhere is requeued shortly before the deadline.

Why it acts in dry-run too: the instance goes away whatever gpusteward does, and the checkpoint
signal is what each owner asked for to save their work; it stops nothing. ``cloud.interruption.act:
notify`` only tells owners. The requeue (Slurm ``scontrol requeue``, a Kubernetes eviction) ends a
run early, so it happens only in enforce. The kill switch holds all of it, as every action.

Each signal is one decision (step ``checkpoint-before-interruption``, L2; the requeue is
``requeue-before-interruption``, L3) carried out by an ``ActionRunner`` of its own: the same
idempotency keys, action rows and audit as any action, but only this step's executors (adapters
over the integration's, see ``CheckpointExecutor``), no approvals (the warning is two minutes), and
owners' notices sent after every signal has gone out. A failed signal is recorded and not retried:
nothing may turn it into a stop later. The step runs after the leader gate: one replica acts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gpusteward.domain.cloud import (
    INTERRUPTION_CHECKPOINT_STEP,
    InterruptionNotice,
    InterruptionWatch,
    NoticeKind,
)
from gpusteward.domain.errors import ExecutionError, PreflightFailed, SourceError
from gpusteward.domain.models import (
    ActionStatus,
    Decision,
    Gpu,
    Level,
    Notice,
    Outcome,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.nodes import NodeControl
from gpusteward.domain.ports import Clock, Executor, Notifier
from gpusteward.domain.records import AuditNote
from gpusteward.domain.store_ports import AuditLog, Docs, RunnerStore
from gpusteward.integrations.cloud.interruption.settings import InterruptionSettings
from gpusteward.notify.throttle import ThrottledNotifier
from gpusteward.runtime.interruption_advice import InterruptionRecord
from gpusteward.runtime.runner import ActionResult, ActionRunner

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)

INTERRUPTION_RULE = "spot-interruption"
INTERRUPTION_REQUEUE_STEP = "requeue-before-interruption"
STEPS = frozenset({INTERRUPTION_CHECKPOINT_STEP, INTERRUPTION_REQUEUE_STEP})


@runtime_checkable
class Checkpointer(Protocol):
    """An executor that can send a workload its checkpoint signal alone (no stop after it)."""

    def checkpoint_now(self, decision: Decision, workload: Workload) -> Outcome: ...


@runtime_checkable
class Requeuer(Protocol):
    """An executor that can hand a workload back to its scheduler to run again elsewhere."""

    def requeue_now(self, decision: Decision, workload: Workload) -> Outcome: ...


class CheckpointExecutor:
    """Implements ``Executor`` for the interruption's two steps over an integration's executor:
    L2 is ``checkpoint_now``, L3 ``requeue_now``, for the workloads the inner one stops at L2."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.name = f"{inner.name}-interruption"

    def supports(self, workload: Workload, level: Level) -> bool:
        able = {Level.GRACEFUL_STOP: Checkpointer, Level.FORCE: Requeuer}.get(level)
        return (
            able is not None
            and isinstance(self.inner, able)
            and self.inner.supports(workload, Level.GRACEFUL_STOP)
        )

    def current(self, workload: Workload) -> Workload | None:
        try:
            return self.inner.current(workload)
        except PreflightFailed:
            raise
        except Exception as e:  # see execute
            raise PreflightFailed(f"cannot read {workload.id} now, not retried: {e}") from e

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        try:
            if decision.level is Level.GRACEFUL_STOP and isinstance(self.inner, Checkpointer):
                return self.inner.checkpoint_now(decision, workload)
            if decision.level is Level.FORCE and isinstance(self.inner, Requeuer):
                return self.inner.requeue_now(decision, workload)
        except PreflightFailed:
            raise
        except Exception as e:
            # Recorded skipped, never failed: a failed action is retried by the ladder's runner,
            # whose executors would make a stop of it. The deadline does not wait for a retry anyway.
            raise PreflightFailed(f"{decision.step} failed, not retried: {e}") from e
        raise PreflightFailed(f"{self.inner.name} cannot {decision.step}")

    def verify(self, decision: Decision, workload: Workload) -> bool:
        return True  # a signal delivered leaves nothing to read back; the outcome says what was sent


class AfterSignals:
    """A ``Notifier`` that holds notices until ``flush``: no owner's channel (a slow webhook) may
    delay another workload's checkpoint signal."""

    def __init__(self, inner: Notifier) -> None:
        self.inner = inner
        self.held: list[Notice] = []

    def send(self, notice: Notice) -> None:
        self.held.append(notice)

    def deliver(self, notice: Notice) -> bool:
        self.held.append(notice)
        return True

    def flush(self) -> None:
        held, self.held = self.held, []
        deliver = getattr(self.inner, "deliver", None)
        for notice in held:
            try:
                if not callable(deliver):
                    self.inner.send(notice)
                elif not deliver(notice):
                    log.warning("interruption notice for %s held back by the notifier", notice.workload_id)
            except Exception:  # one owner's channel failing must not lose the others' notices
                log.exception("interruption notice for %s not sent", notice.workload_id)


def on_node(node: str, workloads: Mapping[str, Workload], gpus: Mapping[str, Gpu]) -> list[Workload]:
    """The workloads holding a GPU on ``node`` (or placed there by their system's reference)."""
    out = []
    for w in workloads.values():
        if w.kind in (WorkloadKind.NODE, WorkloadKind.POOL):
            continue
        nodes = {gpus[u].node for u in w.gpu_uuids if u in gpus}
        nodes |= {n for n in (w.ref.get("node", ""), *w.ref.get("nodes", "").split(",")) if n}
        if node in nodes:
            out.append(w)
    return sorted(out, key=lambda w: w.id)


class InterruptionStore(RunnerStore, AuditLog, Docs, Protocol):
    """What the step writes: actions and notices (its runner), the audit, the advice record."""


@dataclass
class InterruptionStep:
    watch: InterruptionWatch
    runner: ActionRunner
    store: InterruptionStore
    settings: InterruptionSettings
    #: Not dry-run: workloads are also requeued before the deadline.
    enforce: bool
    clock: Clock
    #: Notices being handled, by key, until their deadline has passed.
    active: dict[str, InterruptionNotice] = field(default_factory=dict)
    #: The system's node switch (cordon, Slurm drain): the node is taken out before the requeue.
    node_control: NodeControl | None = None
    _seen: set[str] = field(default_factory=set)
    _drained: set[str] = field(default_factory=set)
    #: Holds owners' notices until every signal of the tick has gone out.
    notify: AfterSignals | None = None
    #: A crash's leftovers exist only at start-up: this step finishes its own actions in one call.
    _orphans_settled: bool = False

    def act(
        self, now: datetime, workloads: Mapping[str, Workload], gpus: Mapping[str, Gpu]
    ) -> list[ActionResult]:
        """Poll the watch; signal the workloads of every node under a notice (each once)."""
        if not self._orphans_settled:
            self._settle_orphans(now)
            self._orphans_settled = True
        try:
            notices = self.watch.poll(now)
        except Exception:  # a watch must never fail the tick
            log.exception("interruption watch failed; nothing acted on this tick")
            notices = []
        for notice in notices:
            self._take(notice, now)
        results: list[ActionResult] = []
        for key, notice in list(self.active.items()):
            if notice.deadline is not None and now >= notice.deadline:
                del self.active[key]
                continue
            results += self._handle(notice, now, workloads, gpus)
        if self.notify is not None:
            self.notify.flush()
        return results

    def _settle_orphans(self, now: datetime) -> None:
        """This step's actions a crash left planned or executing are finished as skipped, never
        resumed: the ladder's reconciler would resume them with its own executors, as a stop."""
        for a in self.store.unfinished_actions(dry_run=False):
            if a.step in STEPS:
                detail = "interrupted by a restart; not repeated"
                note = AuditNote("action.skipped", {"key": a.idempotency_key, "detail": detail})
                self.store.finish_action(a.id, ActionStatus.SKIPPED, detail, now, audit=note)

    def _take(self, notice: InterruptionNotice, now: datetime) -> None:
        if notice.key in self._seen:
            return
        self._seen.add(notice.key)
        left = (notice.deadline - now).total_seconds() if notice.deadline is not None else None
        fields: dict[str, Any] = {
            "key": notice.key,
            "node": notice.node,
            "instance": notice.instance_id,
            "via": notice.via,
            "deadline": notice.deadline.isoformat() if notice.deadline else None,
            "raw": notice.raw,
        }
        if notice.kind is NoticeKind.REBALANCE:
            log.warning(
                "rebalance recommendation for node %s (%s): at risk of interruption", notice.node, notice.via
            )
            self.store.audit("interruption.rebalance", now, None, **fields)
            return
        if left is not None and left <= 0:
            log.warning(
                "interruption notice %s is past its deadline (%s): nothing acted on",
                notice.key,
                notice.deadline,
            )
            self.store.audit("interruption.stale", now, None, **fields)
            return
        log.warning(
            "interruption notice for node %s (%s): the instance is taken at %s",
            notice.node,
            notice.via,
            notice.deadline,
        )
        self.store.audit("interruption.notice", now, None, seconds_left=left, act=self.settings.act, **fields)
        self.active[notice.key] = notice

    def _decisions(
        self, notice: InterruptionNotice, now: datetime, targets: Sequence[Workload], step: str, level: Level
    ) -> list[Decision]:
        when = f"at {notice.deadline:%H:%M:%S} UTC" if notice.deadline else "soon"
        what = {
            INTERRUPTION_CHECKPOINT_STEP: "its checkpoint signal is sent now so that its work can be saved; "
            "gpusteward does not stop it",
            INTERRUPTION_REQUEUE_STEP: "it is requeued now so that its scheduler restarts it elsewhere "
            "from its checkpoint",
        }[step]
        reason = (
            f"The cloud ({notice.provider}, via {notice.via}) takes node {notice.node}'s instance "
            f"{notice.instance_id or '?'} {when} (spot interruption): {what}."
        )
        return [
            Decision(
                workload_id=w.id,
                at=now,
                level=level,
                step=step,
                reason=reason,
                rule=INTERRUPTION_RULE,
                gpu_uuids=w.gpu_uuids,
                idempotency_key=f"{step}:{notice.key}:{w.id}:{w.incarnation}",
            )
            for w in targets
        ]

    def _handle(
        self,
        notice: InterruptionNotice,
        now: datetime,
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
    ) -> list[ActionResult]:
        targets = on_node(notice.node, workloads, gpus)
        by_id = {w.id: w for w in targets}
        checkpoint = self.settings.act == "checkpoint"
        # Where no executor can signal a workload, its owner is told (and nothing else is tried).
        signalled = [w for w in targets if checkpoint and self.runner.executor_for(w, Level.GRACEFUL_STOP)]
        told = [w for w in targets if w not in signalled]
        decisions = [
            *self._decisions(notice, now, signalled, INTERRUPTION_CHECKPOINT_STEP, Level.GRACEFUL_STOP),
            *self._decisions(notice, now, told, INTERRUPTION_CHECKPOINT_STEP, Level.NOTIFY),
        ]
        started = self.clock.monotonic()
        ran = self.runner.run(decisions, by_id)
        took = self.clock.monotonic() - started
        if ran:
            self._audit(notice, now, ran, took)
            for line in InterruptionRecord(self.store).add(notice, ran, by_id, now):
                log.warning("advice: %s", line)  # also in `gpusteward audit`
                self.store.audit("interruption.advice", now, None, advice=line)
        lead = self.settings.requeue_before_deadline_seconds
        due = notice.deadline is not None and now >= notice.deadline - timedelta(seconds=lead)
        if self.enforce and lead > 0 and due:
            self._drain(notice, now)
            movable = [w for w in signalled if self.runner.executor_for(w, Level.FORCE)]
            ran += self.runner.run(
                self._decisions(notice, now, movable, INTERRUPTION_REQUEUE_STEP, Level.FORCE), by_id
            )
        return ran

    def _drain(self, notice: InterruptionNotice, now: datetime) -> None:
        """Take the node out of scheduling (once) so that nothing requeued lands on it again."""
        if self.node_control is None or notice.key in self._drained or self.store.is_paused():
            return
        self._drained.add(notice.key)
        try:
            done = self.node_control.park(notice.node, f"gpusteward: spot interruption {notice.key}", now)
        except (ExecutionError, SourceError) as e:
            log.warning("node %s not taken out of scheduling before the requeue: %s", notice.node, e)
            self.store.audit("interruption.drain", now, None, key=notice.key, node=notice.node, error=str(e))
            return
        self.store.audit("interruption.drain", now, None, key=notice.key, node=notice.node, detail=done)

    def _audit(
        self, notice: InterruptionNotice, now: datetime, ran: Sequence[ActionResult], took: float
    ) -> None:
        counts = {s.value: sum(1 for r in ran if r.status is s) for s in ActionStatus}
        since = (self.clock.now() - notice.seen_at).total_seconds()
        warning = (notice.deadline - notice.seen_at).total_seconds() if notice.deadline else None
        self.store.audit(
            "interruption.checkpoints",
            now,
            None,
            key=notice.key,
            node=notice.node,
            workloads=len(ran),
            signalled=counts["succeeded"],
            not_signalled=counts["skipped"] + counts["failed"],
            run_seconds=round(took, 4),
            since_notice_seconds=round(since, 4),
            share_of_warning=round(since / warning, 5) if warning else None,
            details=[f"{r.decision.workload_id}: {r.status.value}: {r.detail}" for r in ran][:64],
        )
        log.warning(
            "interruption %s: %d of %d workload(s) on %s signalled in %.3f s",
            notice.key,
            counts["succeeded"],
            len(ran),
            notice.node,
            took,
        )


def build_interruption(
    settings: Settings, integration: Integration, store: InterruptionStore, notifier: Notifier, clock: Clock
) -> InterruptionStep | None:
    """The step, when the integration brings a watch (the registry attaches one from ``cloud:``)."""
    watch = integration.interruptions
    if watch is None:
        return None
    # Past the daily notice limit: a notice of the instance going away is no nag to be held back
    # for a digest (the runner records each one as it is queued).
    notify = AfterSignals(notifier.inner if isinstance(notifier, ThrottledNotifier) else notifier)
    runner = ActionRunner(
        store,
        [CheckpointExecutor(e) for e in integration.executors],
        notify,
        clock,
        dry_run=False,  # see the module's docstring: a checkpoint before the instance goes protects work
        approval=None,
    )
    return InterruptionStep(
        watch=watch,
        runner=runner,
        store=store,
        settings=settings.cloud.interruption,
        enforce=not settings.dry_run,
        clock=clock,
        node_control=integration.node_control,
        notify=notify,
    )
