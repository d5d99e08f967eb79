"""The ``remote_write`` source: each tick takes what the senders wrote since the last one.

The series become samples, GPUs and workloads exactly as the ``prometheus`` source makes
them: a ``Fold`` (the ``Assembler``'s arithmetic, with what each series and GPU is kept between
ticks) folds them, and a ``PrometheusSource`` keeps the GPUs, holders and start times between
ticks (its bookkeeping, never its queries; its ``history`` is the optional
start-up backfill, which so leaves that state where the writes take it up).
"""

from __future__ import annotations

import logging
from datetime import datetime

from gpusteward.domain.models import Observation
from gpusteward.domain.sample_table import SampleTable
from gpusteward.integrations.prometheus.remote_write.fold import Fold
from gpusteward.integrations.prometheus.remote_write.receiver import Receiver, Stats, activate
from gpusteward.integrations.prometheus.source import PrometheusSource

log = logging.getLogger(__name__)


class RemoteWriteSource:
    """Implements ``gpusteward.domain.ports.Source`` over a ``Receiver``."""

    name = "remote_write"

    def __init__(self, receiver: Receiver, book: PrometheusSource) -> None:
        self.receiver = receiver
        self.book = book
        self._seen = Stats()
        self.fold = Fold(book.specs, book.labels, book.interval_s, book.ignore_pods, book._identities)

    def close(self) -> None:
        self.book.close()

    def observe(self, now: datetime) -> Observation:
        activate(self.receiver)
        book = self.book
        slots = self.fold.take(self.receiver.drain_batch())
        book._absorb_gpus(self.fold)
        changed = False
        for slot in slots:
            changed = book._apply(slot) or changed
        self.fold.forgotten(book._forget(now.timestamp() - book.window_s, changed))
        self._log_drops()
        return Observation(
            at=now,
            gpus=book._gpu_list(),
            samples=SampleTable.concat([slot.samples for slot in slots]),
            workloads=book._workloads(changed),
        )

    def _log_drops(self) -> None:
        st, seen = self.receiver.stats, self._seen
        dropped = (st.out_of_order - seen.out_of_order, st.too_new - seen.too_new, st.refused - seen.refused)
        if any(dropped):
            log.warning(
                "remote write since the last tick: %d samples out of order, %d over 10 min ahead "
                "(dropped); %d requests refused with 429 (buffer full)",
                *dropped,
            )
        self._seen = Stats(**vars(st))
