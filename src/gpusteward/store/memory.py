"""The state store in memory: every port of ``domain.store_ports`` without a database.

For tests and the simulator (``build_steward(settings, store=MemoryStore())``): the same
semantics as ``store.db.StateStore``, held together by ``tests/store/test_ports_conformance.py``.
Nothing survives the process, one process uses it (no locks), and the audit log is not
hash-chained (the chain guards a database others can write to).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpusteward.domain.models import Decision, Finding, LadderState, Notice, Workload
from gpusteward.domain.queue import StartedWait
from gpusteward.domain.records import (
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
    UsageAmounts,
    UsageKey,
    WorkloadRecord,
    add_showback,
    check_closable,
    day_key,
    episode_subject,
    episode_waste,
    jsonable,
    move_late,
)
from gpusteward.domain.store_ports import QUEUE_WAITS_KEPT
from gpusteward.store.memory_controls import MemoryControls, MemoryJournal, last_n

_MAXED = ("gpus_requested", "gpus_held", "advise_idle_gpus")


class MemoryLedger:
    """Ledger amounts added per key (as ``store.ledger.LedgerStore`` adds them to rows)."""

    def __init__(self) -> None:
        self.daily: dict[DailyKey, DailyAmounts] = {}
        self.usage: dict[UsageKey, UsageAmounts] = {}
        self._marks: dict[str, Mark] = {}
        self._showback: dict[ShowbackKey, ShowbackAmounts] = {}
        self._closed: dict[str, datetime] = {}

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
        for sk, sa in move_late(showback or {}, self._closed, late_day).items():
            add_showback(self._showback.setdefault(sk, ShowbackAmounts()), sa)
        for k, a in daily.items():
            old = self.daily.setdefault(k, DailyAmounts())
            for f in fields(DailyAmounts):
                setattr(old, f.name, getattr(old, f.name) + getattr(a, f.name))
        for uk, u in usage.items():
            prev = self.usage.get(uk)
            if prev is None:
                self.usage[uk] = replace(u)
                continue
            # The owner as last seen; the most GPUs of the day; hours added up.
            maxed = {n: max(getattr(u, n), getattr(prev, n)) for n in _MAXED}
            hours = {n: getattr(prev, n) + getattr(u, n) for n in ("held_gpu_hours", "busy_gpu_hours")}
            self.usage[uk] = replace(u, **maxed, **hours)
        for key in drop_marks:
            self._marks.pop(key, None)
        for m in marks:
            self._marks[m.key] = Mark(m.key, m.until, jsonable(dict(m.data)))

    def marks(self) -> dict[str, Mark]:
        return dict(self._marks)

    def showback(self, start: date, end: date, *, team: str | None = None) -> list[ShowbackRow]:
        lo, hi = day_key(start), day_key(end)
        return [
            ShowbackRow(k, replace(a))
            for k, a in sorted(self._showback.items())
            if lo <= k.day < hi and (team is None or k.team == team)
        ]

    def close_month(self, month: str, at: datetime) -> bool:
        check_closable(month, at)
        if month in self._closed:
            return False
        self._closed[month] = at
        return True

    def closed_months(self) -> dict[str, datetime]:
        return dict(self._closed)


@dataclass(slots=True)
class _Episode:
    id: int
    subject: str
    finding: Finding
    first_seen_at: datetime
    ended_at: datetime | None = None

    def record(self) -> FindingEpisode:
        f = self.finding
        return FindingEpisode(self.id, f, self.first_seen_at, f.at, self.ended_at)


def _stored(f: Finding, at: datetime, waste: Mapping[str, Any] | None = None) -> Finding:
    """The finding as a store keeps it: seen at ``at``, evidence through JSON (no NaN or
    infinity: they come back NaN, as from SQL)."""
    evidence = {
        str(outer): {str(k): float(v) if math.isfinite(v) else math.nan for k, v in vals.items()}
        for outer, vals in f.evidence.items()
    }
    return replace(f, at=at, evidence=evidence, **(waste or {}))


class MemoryStore(MemoryJournal, MemoryControls):
    """Implements ``domain.store_ports.TickStore`` in memory."""

    def __init__(self) -> None:
        MemoryJournal.__init__(self)
        MemoryControls.__init__(self)
        self._ladders: dict[tuple[bool, str], LadderState] = {}
        self._episodes: list[_Episode] = []
        self._decisions: list[Decision] = []
        self._notices: list[NoticeRecord] = []
        self._audit: list[AuditRecord] = []
        self._workloads: dict[str, WorkloadRecord] = {}
        self._ledger = MemoryLedger()
        self._docs: dict[str, Any] = {}
        self._waits: dict[tuple[str, str], StartedWait] = {}
        self._waits_pruned_to: datetime | None = None

    @property
    def ledger(self) -> MemoryLedger:
        return self._ledger

    def close(self) -> None:
        """Nothing to release; here so a test can close either store."""

    # -- ladders ------------------------------------------------------------------------------
    def load_ladders(self, dry_run: bool) -> dict[str, LadderState]:
        return {w: s for (d, w), s in sorted(self._ladders.items()) if d == dry_run}

    def update_ladders(self, save: Iterable[LadderState], clear: Iterable[str], *, dry_run: bool) -> None:
        states = list(save)
        for wid in {s.workload_id for s in states} | set(clear):
            self._ladders.pop((dry_run, wid), None)
        for s in states:
            self._ladders[(dry_run, s.workload_id)] = s

    # -- finding episodes and decisions -------------------------------------------------------
    def record_findings(self, findings: Sequence[Finding], at: datetime) -> None:
        latest = {(episode_subject(f), f.rule): f for f in findings}
        open_ = {(e.subject, e.finding.rule): e for e in self._episodes if e.ended_at is None}
        for key, f in sorted(latest.items(), key=lambda kv: kv[0]):
            e = open_.get(key)
            if e is None:
                self._episodes.append(_Episode(len(self._episodes) + 1, key[0], _stored(f, at), at))
                continue
            since = (at - e.finding.at).total_seconds() / 60
            waste = episode_waste(f, max(f.wasted_minutes, e.finding.wasted_minutes + since))
            e.finding = _stored(f, at, waste)

    def close_findings(self, keys: Iterable[tuple[str, str]], at: datetime) -> None:
        ending = set(keys)
        for e in self._episodes:
            if e.ended_at is None and (e.finding.workload_id, e.finding.rule) in ending:
                e.ended_at = at

    def flush_kept(self) -> None:
        """Nothing waits: every refresh is stored at once."""

    def reread(self) -> None:
        """Nothing is kept apart from the store itself."""

    def open_episode_keys(self) -> set[tuple[str, str]]:
        return {
            (e.finding.workload_id, e.finding.rule)
            for e in self._episodes
            if e.ended_at is None and e.finding.workload_id is not None
        }

    def open_findings(self) -> list[FindingEpisode]:
        return [e.record() for e in self._episodes if e.ended_at is None]

    def findings_for(self, workload_id: str) -> list[FindingEpisode]:
        return [e.record() for e in self._episodes if e.finding.workload_id == workload_id]

    def all_findings(self) -> list[FindingEpisode]:
        return [e.record() for e in self._episodes]

    def record_decisions(self, decisions: Sequence[Decision]) -> int:
        last: dict[str, tuple[int, str, str]] = {}
        wanted = {d.workload_id for d in decisions}
        for d in self._decisions:
            if d.workload_id in wanted:
                last[d.workload_id] = d.signature
        new = 0
        for d in decisions:
            sig = d.signature
            if last.get(d.workload_id) != sig:
                last[d.workload_id] = sig
                self._decisions.append(replace(d, gpu_uuids=tuple(d.gpu_uuids)))
                new += 1
        return new

    def decisions_for(self, workload_id: str, limit: int = 100) -> list[Decision]:
        return last_n((d for d in self._decisions if d.workload_id == workload_id), limit)

    # -- notices ------------------------------------------------------------------------------
    def record_notice(self, notice: Notice, *, sent: bool) -> int:
        record = NoticeRecord(len(self._notices) + 1, notice, sent)
        self._notices.append(record)
        return record.id

    def notices(self, workload_id: str | None = None, limit: int = 100) -> list[NoticeRecord]:
        mine = (n for n in self._notices if workload_id is None or n.notice.workload_id == workload_id)
        return last_n(mine, limit)

    def notices_since(self, at: datetime) -> list[NoticeRecord]:
        return [n for n in self._notices if n.notice.at >= at]

    def notice_sent(self, dedup_key: str) -> bool:
        return any(n.sent and n.notice.dedup_key == dedup_key for n in self._notices)

    # -- audit log ----------------------------------------------------------------------------
    def audit(self, event: str, at: datetime, workload_id: str | None = None, **payload: Any) -> None:
        self._audit.append(AuditRecord(len(self._audit) + 1, at, event, workload_id, jsonable(payload)))

    def audit_log(self, limit: int = 100, workload_id: str | None = None) -> list[AuditRecord]:
        mine = (r for r in self._audit if workload_id is None or r.workload_id == workload_id)
        return last_n(mine, limit)

    # -- JSON documents (the roll-out's records) ----------------------------------------------
    def load_doc(self, key: str) -> Any:
        return copy.deepcopy(self._docs.get(key))

    def save_doc(
        self,
        key: str,
        value: Any,
        *,
        at: datetime,
        audit: AuditNote | None = None,
        workload_id: str | None = None,
    ) -> None:
        self._docs[key] = copy.deepcopy(jsonable(value))
        if audit is not None:
            self.audit(audit.event, at, workload_id, **audit.payload)

    # -- queue waits: one per (source, job id), the first sighting kept ------------------------
    def record_queue_waits(self, waits: Iterable[StartedWait], at: datetime) -> None:
        for w in waits:
            self._waits.setdefault((w.source, w.id), replace(w, started_at=w.started_at.astimezone(UTC)))
        cutoff = at - QUEUE_WAITS_KEPT
        if self._waits_pruned_to is None or cutoff - self._waits_pruned_to >= timedelta(days=1):
            # Once a day of ``at`` at most: a simulated run writes every tick.
            self._waits = {k: w for k, w in self._waits.items() if w.started_at >= cutoff}
            self._waits_pruned_to = cutoff

    def queue_waits(self, since: datetime, until: datetime) -> list[StartedWait]:
        found = (w for w in self._waits.values() if since <= w.started_at < until)
        return sorted(found, key=lambda w: (w.started_at, w.source, w.id))

    # -- workload snapshots -------------------------------------------------------------------
    def remember_workloads(self, workloads: Iterable[Workload], at: datetime) -> None:
        for w in workloads:
            prev = self._workloads.get(w.id)
            self._workloads[w.id] = WorkloadRecord(
                id=w.id,
                kind=w.kind,
                name=w.name,
                owner=w.owner,
                gpu_uuids=tuple(w.gpu_uuids),
                started_at=w.started_at.astimezone(UTC),
                first_seen_at=at if prev is None else prev.first_seen_at,
                last_seen_at=at,
                source=w.source,
                labels=dict(w.labels),
                annotations=dict(w.annotations),
            )

    def workload_info(self, workload_id: str) -> WorkloadRecord | None:
        return self._workloads.get(workload_id)


if TYPE_CHECKING:  # mypy holds both stores to every port of the tick
    from gpusteward.domain.store_ports import TickStore
    from gpusteward.store.db import StateStore

    _memory: TickStore = MemoryStore()
    _sql: TickStore = StateStore()
