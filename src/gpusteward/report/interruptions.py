"""The report's Interruptions section (issue 18), cluster page only: from the audit of the
period, the spot interruption notices seen (``interruption.notice``), the workloads on their nodes
and how many got their checkpoint signal (``interruption.checkpoints``), the slowest notice → last
signal time as a share of the warning the cloud gave, and the advice lines of workloads
interrupted often that never checkpoint (``InterruptionRecord.advice``). No notice and no advice:
no section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from gpusteward.runtime.interruption_advice import InterruptionRecord
from gpusteward.store.browse import audit_page
from gpusteward.store.db import StateStore

_PAGE = 500


@dataclass(slots=True)
class InterruptionSection:
    notices: int = 0
    #: Workloads on the nodes of the notices, and those whose checkpoint signal was sent.
    workloads: int = 0
    signalled: int = 0
    #: The slowest notice → last signal time as a share of the warning (None: no deadline known).
    slowest_share: float | None = None
    slowest_seconds: float | None = None
    slowest_node: str = ""
    advice: list[str] = field(default_factory=list)


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def gather_interruptions(store: StateStore, start: date, end: date) -> InterruptionSection | None:
    """The section for ``start`` <= day < ``end``; None when there is nothing to show."""
    since, until = _midnight(start), _midnight(end)
    section = InterruptionSection(advice=InterruptionRecord(store).advice())
    before: int | None = None
    while True:  # newest first: stop at the first page that reaches before the period
        page = audit_page(store, event="interruption.", before=before, limit=_PAGE)
        for rec in page.rows:
            if not since <= _utc(rec.at) < until:
                continue
            p = rec.payload
            if rec.event == "interruption.notice":
                section.notices += 1
            elif rec.event == "interruption.checkpoints":
                section.workloads += int(_number(p.get("workloads")) or 0)
                section.signalled += int(_number(p.get("signalled")) or 0)
                share = _number(p.get("share_of_warning"))
                if share is not None and (section.slowest_share is None or share > section.slowest_share):
                    section.slowest_share = share
                    section.slowest_seconds = _number(p.get("since_notice_seconds"))
                    section.slowest_node = str(p.get("node", ""))
        oldest = page.rows[-1].at if page.rows else None
        if page.next_before is None or oldest is None or _utc(oldest) < since:
            break
        before = page.next_before
    if section.notices == 0 and section.workloads == 0 and not section.advice:
        return None
    return section
