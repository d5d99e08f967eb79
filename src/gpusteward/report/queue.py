"""The report's Queue section (issue 16): how long jobs that started in the period waited.

From the stored queue waits (``domain.store_ports.QueueWaitLog``: start - submit of each job
the schedulers showed as started while the loop ran, once per job): jobs started, the GPUs they
asked for, and queue time p50/p95 overall and per queue (Slurm partition, Kubernetes queue or
namespace), numpy's linear percentiles as on ``/metrics``. Jobs still waiting at the end of the
period are not in it: they have not started. Cluster page only: a queue is no team.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from gpusteward.analysis.queue_figures import QueueTime, queue_time
from gpusteward.domain.queue import StartedWait
from gpusteward.domain.store_ports import QueueWaitLog


@dataclass(frozen=True, slots=True)
class QueueRow:
    #: The queue's name; "" for the whole cluster.
    queue: str
    started: int
    gpus: int
    p50_s: float | None
    p95_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"started": self.started, "gpus": self.gpus, "p50_s": self.p50_s, "p95_s": self.p95_s}


@dataclass(frozen=True, slots=True)
class QueueSection:
    total: QueueRow = QueueRow("", 0, 0, None, None)
    #: Per queue, the longest p95 first.
    rows: list[QueueRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The section for ``report --json``: seconds, None where no job started."""
        return {**self.total.as_dict(), "by_queue": {r.queue: r.as_dict() for r in self.rows}}


def _row(queue: str, waits: list[StartedWait]) -> QueueRow:
    t: QueueTime = queue_time(waits)
    return QueueRow(queue, t.started, sum(w.gpus for w in waits), t.p50_s, t.p95_s)


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def gather_queue(store: QueueWaitLog, start: date, end: date) -> QueueSection:
    """Queue time of the jobs started during ``start`` <= day < ``end``."""
    waits = store.queue_waits(_midnight(start), _midnight(end))
    by_queue: dict[str, list[StartedWait]] = {}
    for w in waits:
        by_queue.setdefault(w.queue, []).append(w)
    rows = [_row(q, ws) for q, ws in by_queue.items()]
    rows.sort(key=lambda r: (-(r.p95_s or 0.0), r.queue))
    return QueueSection(_row("", waits), rows)


def duration(seconds: float | None) -> str:
    """A wait for people: seconds, minutes, hours or days; "n/a" for none."""
    if seconds is None:
        return "n/a"
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
