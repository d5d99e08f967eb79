"""The state store as narrow ports: what each part of the tick reads and writes.

``store.db.StateStore`` (SQL) and ``store.memory.MemoryStore`` (tests, the simulator) both
satisfy every port structurally; ``tests/store/test_ports_conformance.py`` runs one suite over
both so they cannot drift. A consumer is typed to the narrowest port it uses; ``TickStore``
gathers them for the loop, which hands the parts on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any, Protocol

from gpusteward.domain.models import (
    Action,
    ActionStatus,
    ApprovalStatus,
    Decision,
    Finding,
    LadderState,
    Level,
    Notice,
    Workload,
)
from gpusteward.domain.queue import StartedWait
from gpusteward.domain.records import (
    ApprovalRecord,
    AuditNote,
    AuditRecord,
    DailyAmounts,
    DailyKey,
    FindingEpisode,
    Mark,
    NoticeRecord,
    ShowbackAmounts,
    ShowbackKey,
    ShowbackRow,
    SnoozeRecord,
    UsageAmounts,
    UsageKey,
    WorkloadRecord,
)


def retry_backoff(attempts: int) -> timedelta:
    """How long a failed action waits before its retry: 1, 2, 4 … minutes, capped at 30."""
    return timedelta(minutes=min(30, 2 ** max(0, attempts - 1)))


# -- an action's life: one table of moves, obeyed by every store ---------------------------------
#: Where an action may move from: ``start`` (planned or failed → executing, one more attempt),
#: ``pend`` (executing, its follow-up due later), ``finish`` (to a final state; only an action
#: that ran can succeed, one refused before acting may also fail or be skipped from planned).
_START_FROM = (ActionStatus.PLANNED, ActionStatus.FAILED)
_PEND_FROM = (ActionStatus.EXECUTING,)
FINAL_STATES = frozenset({ActionStatus.SUCCEEDED, ActionStatus.FAILED, ActionStatus.SKIPPED})


def moves_from(move: str, to: ActionStatus | None = None) -> tuple[ActionStatus, ...]:
    """The states ``move`` (start, pend, finish to ``to``) may leave; ValueError for a move the
    life of an action has not."""
    if move == "start":
        return _START_FROM
    if move == "pend":
        return _PEND_FROM
    if move == "finish" and to in FINAL_STATES:
        if to is ActionStatus.SUCCEEDED:
            return (ActionStatus.EXECUTING,)
        return (ActionStatus.EXECUTING, ActionStatus.PLANNED)
    raise ValueError(f"an action finishes as succeeded, failed or skipped, not {to.value if to else move}")


class LadderStore(Protocol):
    """Where each workload stands on its ladder, per mode (a dry run never moves a real ladder)."""

    def load_ladders(self, dry_run: bool) -> dict[str, LadderState]: ...

    def update_ladders(self, save: Iterable[LadderState], clear: Iterable[str], *, dry_run: bool) -> None:
        """Save some ladders and end others, all or nothing."""
        ...


class ActionJournal(Protocol):
    """Actions: planned → executing → succeeded | failed | skipped, one per idempotency key and
    mode. Each state change is stored with its ``AuditNote``, all or nothing."""

    def plan_action(self, decision: Decision, *, dry_run: bool, at: datetime) -> Action | None:
        """A new ``planned`` action, the failed one of this key when its retry is due, else None."""
        ...

    def start_action(self, action_id: int, at: datetime, *, audit: AuditNote | None = None) -> Action: ...

    def pend_action(
        self, action_id: int, due_at: datetime, detail: str, at: datetime, *, audit: AuditNote | None = None
    ) -> Action: ...

    def finish_action(
        self,
        action_id: int,
        status: ActionStatus,
        detail: str,
        at: datetime,
        *,
        audit: AuditNote | None = None,
    ) -> Action: ...

    def retries_due(self, at: datetime, *, dry_run: bool) -> list[Action]: ...

    def followups_due(self, at: datetime, *, dry_run: bool) -> list[Action]: ...

    def unfinished_actions(self, *, dry_run: bool) -> list[Action]:
        """``planned`` or ``executing`` without a follow-up due: what a crash left behind."""
        ...

    def count_actions_since(
        self, at: datetime, min_level: Level = Level.GRACEFUL_STOP, *, dry_run: bool = False
    ) -> tuple[int, int]: ...

    def actions(self, limit: int = 50, workload_id: str | None = None) -> list[Action]: ...


class AuditLog(Protocol):
    """Append-only. The SQL store hash-chains its records (``store.audit_chain``)."""

    def audit(self, event: str, at: datetime, workload_id: str | None = None, **payload: Any) -> None: ...

    def audit_log(self, limit: int = 100, workload_id: str | None = None) -> list[AuditRecord]: ...


class EpisodeStore(Protocol):
    """Finding episodes (a rule's waste on a workload, open until it ends) and decisions."""

    def record_findings(self, findings: Sequence[Finding], at: datetime) -> None: ...

    def close_findings(self, keys: Iterable[tuple[str, str]], at: datetime) -> None: ...

    def open_episode_keys(self) -> set[tuple[str, str]]: ...

    def flush_kept(self) -> None:
        """Write what waits in memory: open episodes' refreshes, ladders' ``last_seen_at``."""
        ...

    def reread(self) -> None:
        """Forget what is kept in memory of open episodes and ladders (leadership changed hands)."""
        ...

    def open_findings(self) -> list[FindingEpisode]: ...

    def findings_for(self, workload_id: str) -> list[FindingEpisode]: ...

    def record_decisions(self, decisions: Sequence[Decision]) -> int:
        """Store those that differ (level, step, hold) from the workload's last; how many."""
        ...

    def decisions_for(self, workload_id: str, limit: int = 100) -> list[Decision]: ...


class NoticeLog(Protocol):
    def record_notice(self, notice: Notice, *, sent: bool) -> int: ...

    def notices(self, workload_id: str | None = None, limit: int = 100) -> list[NoticeRecord]: ...

    def notices_since(self, at: datetime) -> list[NoticeRecord]: ...

    def notice_sent(self, dedup_key: str) -> bool: ...


class Controls(Protocol):
    """The kill switch, approvals of high-level steps and snoozes."""

    def is_paused(self) -> bool: ...

    def set_paused(self, paused: bool, *, by: str, reason: str, at: datetime) -> None: ...

    def request_approval(
        self, decision: Decision, *, dry_run: bool, at: datetime, ttl: timedelta
    ) -> ApprovalRecord: ...

    def approval(self, approval_id: int) -> ApprovalRecord | None: ...

    def approvals(
        self, status: ApprovalStatus | None = None, *, dry_run: bool | None = None, limit: int = 100
    ) -> list[ApprovalRecord]: ...

    def latest_approvals(
        self, workload_ids: Iterable[str], *, dry_run: bool
    ) -> dict[str, tuple[ApprovalRecord, int]]:
        """Action key → (its latest approval request, how many it had), for these workloads."""
        ...

    def decide_approval(
        self, approval_id: int, *, approve: bool, by: str, reason: str, at: datetime
    ) -> ApprovalRecord: ...

    def use_approval(self, approval_id: int, at: datetime) -> ApprovalRecord: ...

    def expire_approvals(self, at: datetime) -> list[ApprovalRecord]: ...

    def snooze(
        self, workload_id: str, *, until: datetime, by: str, reason: str, at: datetime
    ) -> SnoozeRecord: ...

    def active_snoozes(self, at: datetime) -> dict[str, SnoozeRecord]: ...


class Docs(Protocol):
    """Small JSON documents by key (the roll-out's stage history and watch); a write may carry
    its audit record, stored in the same transaction."""

    def load_doc(self, key: str) -> Any: ...

    def save_doc(
        self,
        key: str,
        value: Any,
        *,
        at: datetime,
        audit: AuditNote | None = None,
        workload_id: str | None = None,
    ) -> None: ...


class WorkloadBook(Protocol):
    """What was last seen of each workload, kept after it ends."""

    def remember_workloads(self, workloads: Iterable[Workload], at: datetime) -> None: ...

    def workload_info(self, workload_id: str) -> WorkloadRecord | None: ...


class Ledger(Protocol):
    """Waste and savings amounts, added (never overwritten), and the marks that keep counting
    exact across restarts."""

    def add(
        self,
        daily: Mapping[DailyKey, DailyAmounts],
        usage: Mapping[UsageKey, UsageAmounts],
        marks: Iterable[Mark] = (),
        drop_marks: Iterable[str] = (),
        *,
        showback: Mapping[ShowbackKey, ShowbackAmounts] | None = None,
        late_day: str | None = None,
    ) -> None:
        """Add amounts, in one transaction. Showback amounts of a closed month go to
        ``late_day`` (today) instead: a closed month is never rewritten."""
        ...

    def marks(self) -> dict[str, Mark]: ...

    def showback(self, start: date, end: date, *, team: str | None = None) -> list[ShowbackRow]:
        """Showback rows of the days ``start`` <= day < ``end`` (of one team), in key order."""
        ...

    def close_month(self, month: str, at: datetime) -> bool:
        """Freeze the showback rows of ``month`` (YYYY-MM); False when it was closed already."""
        ...

    def closed_months(self) -> dict[str, datetime]:
        """Closed months (YYYY-MM) and when each was closed."""
        ...


#: How long a started job's queue wait is kept (a year's reports, and a month to spare).
QUEUE_WAITS_KEPT = timedelta(days=400)


class QueueWaitLog(Protocol):
    """How long each started job waited in its queue, for the reports' queue time. A source
    shows a job as started for as long as its look-back, so many ticks see it: it is kept once,
    by (source, job id). Jobs still waiting are not here: they have not started."""

    def record_queue_waits(self, waits: Iterable[StartedWait], at: datetime) -> None:
        """Keep the waits not kept yet (the first sighting wins); forget those that started
        more than ``QUEUE_WAITS_KEPT`` before ``at``."""
        ...

    def queue_waits(self, since: datetime, until: datetime) -> list[StartedWait]:
        """Jobs started in [since, until), by start time (then source and id)."""
        ...


class HasLedger(Protocol):
    @property
    def ledger(self) -> Ledger: ...


class RunnerStore(ActionJournal, NoticeLog, Controls, Protocol):
    """What the act phase (runner, reconciliation, follow-ups) uses."""


class TickStore(
    LadderStore,
    ActionJournal,
    AuditLog,
    EpisodeStore,
    NoticeLog,
    Controls,
    WorkloadBook,
    HasLedger,
    Docs,
    QueueWaitLog,
    Protocol,
):
    """Everything one tick reads and writes."""
