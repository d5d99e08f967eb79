"""The schedulers' queues, read once per tick and merged into one ``Queue`` for the policy.

Each integration with a queue (Slurm, Kubernetes, the simulator) is asked once per tick. One
that fails is logged and left out: the tick goes on with the others' queues, and with none at
all when no queue was read, which the policy takes as "unknown" (the ladder keeps its
configured pace), never as "nobody waits".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpusteward.domain.errors import StoreError
from gpusteward.domain.integration import Integration
from gpusteward.domain.queue import Queue
from gpusteward.domain.store_ports import QueueWaitLog

log = logging.getLogger(__name__)

Reader = Callable[[datetime], Queue]


def merge(queues: Sequence[Queue]) -> Queue | None:
    """One queue holding every source's pending and started jobs; None for no queue at all."""
    if not queues:
        return None
    return Queue(
        at=max(q.at for q in queues),
        pending=tuple(p for q in queues for p in q.pending),
        started=tuple(s for q in queues for s in q.started),
    )


@dataclass
class QueueReader:
    """The integrations' queue readers by name; ``read`` keeps the latest merged queue."""

    readers: Sequence[tuple[str, Reader]] = ()
    latest: Queue | None = field(default=None, init=False)
    #: (source, job id) of the waits already written and still in the look-back: a job shown
    #: tick after tick is written once, not re-sent each tick for the store to drop.
    _written: set[tuple[str, str]] = field(default_factory=set, init=False)

    @classmethod
    def of(cls, integrations: Iterable[Integration]) -> QueueReader:
        return cls([(i.name, i.queue) for i in integrations if i.queue is not None])

    def read(self, now: datetime, errors: list[str]) -> Queue | None:
        """This tick's merged queue, or None when none could be read; each failure is logged
        and added to ``errors`` (the tick's error lines), never raised."""
        got: list[Queue] = []
        for name, reader in self.readers:
            try:
                q = reader(now)
            except Exception as e:  # any failure of an outside system: this tick has no queue from it
                log.warning(
                    "queue of %s could not be read (%s); its jobs count as unknown this tick", name, e
                )
                errors.append(f"queue of {name} failed: {e}")
                continue
            # Jobs named by their source, so merged queues from two systems stay apart.
            got.append(
                replace(
                    q,
                    pending=tuple(p if p.source else replace(p, source=name) for p in q.pending),
                    started=tuple(s if s.source else replace(s, source=name) for s in q.started),
                )
            )
        self.latest = merge(got)
        return self.latest

    def record(self, store: QueueWaitLog, queue: Queue | None, now: datetime) -> None:
        """Keep the started jobs' waits for the reports (the leader's record phase). Only jobs not
        written yet are sent (the store keeps a job once anyway, across restarts); a write that
        fails is logged, not raised: the next tick's look-back brings the same jobs back."""
        if queue is None:
            return
        shown = {(s.source, s.id) for s in queue.started}
        new = [s for s in queue.started if (s.source, s.id) not in self._written]
        if new:
            try:
                store.record_queue_waits(new, now)
            except StoreError:
                log.exception("queue waits not written; the next tick's look-back brings them again")
                self._written &= shown
                return
        # A job that left the look-back never comes back: only what is shown needs remembering.
        self._written = shown
