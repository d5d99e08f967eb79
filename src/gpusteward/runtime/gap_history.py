"""The idle-gap record behind ``p_busy_again(H)``: kept beyond the window, across restarts.

One ``GapBook`` (analysis/idle_gaps.py) per horizon a rule asks for. Every tick, on every
replica (a follower keeps it warm), each workload's busy samples since the last update are
folded in; only the leader saves (``save_due``, from the tick's record phase), as one ledger
mark per horizon (``gaps:<seconds>``) every few minutes, read back at the first update. As
with the lifetimes (runtime/insights.py), a restart keeps the counts and censors what was
open: a spell seen only in part teaches nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from gpusteward.analysis.aggregates import IDLE_PCT
from gpusteward.analysis.idle_gaps import GapBook, GapOdds, IntArray
from gpusteward.analysis.inputs import gap_horizons
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.classes import CLASSES, workload_class
from gpusteward.domain.models import Metric, Workload
from gpusteward.domain.records import Mark
from gpusteward.domain.store_ports import HasLedger
from gpusteward.store.window import WindowView

log = logging.getLogger(__name__)
_KEY = "gaps:"


@dataclass
class GapHistory:
    horizons: Sequence[float]
    store: HasLedger | None = None
    save_every_s: float = 300.0
    books: dict[float, GapBook] = field(default_factory=dict)
    _last: datetime | None = None
    _loaded: bool = False
    _saved: datetime | None = None

    def __post_init__(self) -> None:
        for h in self.horizons:
            self.books.setdefault(float(h), GapBook(h))

    def update(self, view: WindowView, workloads: Sequence[Workload], now: datetime) -> None:
        """Fold in the samples since the last update (the newest slot the first time)."""
        self._load()
        if self._last is not None and now <= self._last:
            return
        span = view.interval_s if self._last is None else (now - self._last).total_seconds()
        self._last = now
        span = min(span, view.window_s)
        per = [w.gpu_uuids for w in workloads]
        sizes = np.fromiter(map(len, per), np.intp, len(per))
        held = sizes > 0
        if not held.any() or len(view) == 0:
            return
        idx = view.indices_of(u for ps in per for u in ps)
        seen = idx >= 0
        safe = np.where(seen, idx, 0)
        share = view.fraction_below(Metric.GPU_UTIL, IDLE_PCT, span)[safe]
        present = view.coverage(Metric.GPU_UTIL, span)[safe] * view.slots_in(span)
        last = view.last(Metric.GPU_UTIL)[safe]
        busy = np.where(seen, np.nan_to_num((1.0 - share) * present), 0.0)
        got = seen & (present > 0)
        with np.errstate(invalid="ignore"):
            idle = np.where(seen, last < IDLE_PCT, True)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))[held]
        # A workload is as busy as its busiest GPU, idle only when every GPU is.
        w_busy = np.maximum.reduceat(busy, starts)
        w_got = np.logical_or.reduceat(got, starts)
        w_idle = np.logical_and.reduceat(idle, starts)
        ws = [w for w, h in zip(workloads, held.tolist(), strict=True) if h]
        keep = np.flatnonzero(w_got)
        ids = [ws[i].id for i in keep.tolist()]
        codes = {c: i for i, c in enumerate(CLASSES)}
        classes = np.fromiter((codes[workload_class(ws[i])] for i in keep.tolist()), np.intp, len(ids))
        for book in self.books.values():
            book.update(now.timestamp(), ids, classes, w_busy[keep], w_idle[keep])

    def odds(self, horizon_s: float, ids: Sequence[str], classes: IntArray, now: datetime) -> GapOdds | None:
        book = self.books.get(float(horizon_s))
        return None if book is None else book.odds(ids, classes, now.timestamp())

    def save_due(self, now: datetime, running: Sequence[str] = ()) -> None:
        """The leader's part: save every ``save_every_s`` (a follower only counts)."""
        if self._saved is not None and (now - self._saved).total_seconds() < self.save_every_s:
            return
        if running:
            keep = set(running)
            for book in self.books.values():
                book.forget(keep)
        if self.store is None:
            return
        marks = [Mark(f"{_KEY}{h:g}", now, b.to_data()) for h, b in sorted(self.books.items())]
        try:
            self.store.ledger.add({}, {}, marks)
        except Exception:  # the counts stay in memory; the next save tries again
            log.exception("idle-gap history not saved")
            return
        self._saved = now

    def _load(self) -> None:
        if self._loaded or self.store is None:
            return
        self._loaded = True
        marks = self.store.ledger.marks()
        for h, book in self.books.items():
            m = marks.get(f"{_KEY}{h:g}")
            if m is not None:
                book.load(m.data)


def build_gap_history(rules: Sequence[CompiledRule], store: HasLedger | None) -> GapHistory | None:
    """A record for each horizon the rules read (None when no rule reads one)."""
    horizons: set[float] = set()
    for r in rules:
        horizons |= gap_horizons(r.when.aggregates)
        if r.waste is not None:
            horizons |= gap_horizons(r.waste.aggregates)
    return GapHistory(sorted(horizons), store) if horizons else None
