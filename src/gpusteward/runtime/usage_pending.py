"""The per-workload part of the ledger recorder (``runtime.ledger_recorder``): each workload's GPU
use per day (GPU-hours held and busy, the most GPUs requested and held, the most an
over-provisioning advice named idle), waiting for the recorder's flush.

Every tick adds every running workload (25,000 at 100,000 GPUs). The amounts are numpy columns,
one row per workload seen that day, and a tick's use is summed per workload over the workloads'
layout (``analysis.holdings.LAYOUTS``: every workload's GPUs in one row, kept while the same
workload objects come in the same order), so a tick costs numpy's work, and a look-up per GPU
only when the layout or the fresh use's list of GPUs (``runtime.fresh_use``) is another one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.holdings import LAYOUTS, Layout
from gpusteward.domain.models import Workload
from gpusteward.domain.usage_rows import UsageRow, UsageRows
from gpusteward.runtime.fresh_use import FreshUse

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ObjArray = npt.NDArray[np.object_]
# The integer columns: GPUs requested and held (their largest), GPUs advised idle (the largest).
REQUESTED, HELD, IDLE = range(3)
# The hours: held and busy (utilisation-weighted).
HELD_H, BUSY_H = range(2)


class _Day:
    """One day's rows: one per workload seen that day, in the order they were first seen."""

    def __init__(self) -> None:
        #: Workload id -> row (in row order).
        self.index: dict[str, int] = {}
        self.user: ObjArray = np.empty(0, dtype=object)
        self.team: ObjArray = np.empty(0, dtype=object)
        self.counts: IntArray = np.zeros((0, 3), dtype=np.int64)
        self.hours: FloatArray = np.zeros((0, 2), dtype=np.float64)
        #: Rows with use since the last flush (a workload without data adds nothing).
        self.touched = np.zeros(0, dtype=np.bool_)

    def rows(self, workloads: Sequence[Workload]) -> npt.NDArray[np.intp]:
        """The row of each workload, new ones added (untouched) at the end."""
        index = self.index
        for w in workloads:
            index.setdefault(w.id, len(index))
        grow = len(index) - self.touched.size
        if grow > 0:
            self.user = np.concatenate((self.user, np.full(grow, "", dtype=object)))
            self.team = np.concatenate((self.team, np.full(grow, "", dtype=object)))
            self.counts = np.concatenate((self.counts, np.zeros((grow, 3), dtype=np.int64)))
            self.hours = np.concatenate((self.hours, np.zeros((grow, 2), dtype=np.float64)))
            self.touched = np.concatenate((self.touched, np.zeros(grow, dtype=np.bool_)))
        return np.fromiter(map(index.__getitem__, (w.id for w in workloads)), np.intp, len(workloads))

    def reset(self) -> None:
        """No amounts pending; the rows stay for the rest of the day."""
        self.counts[:] = 0
        self.hours[:] = 0.0
        self.touched[:] = False


@dataclass(frozen=True)
class _Placed:
    """A layout's workloads placed in one day's rows, with the columns a tick reads of them."""

    layout: Layout
    day: _Day
    rows: npt.NDArray[np.intp]
    requested: IntArray
    sizes: IntArray
    user: ObjArray
    team: ObjArray
    position: dict[str, int]  # workload id -> its position in the layout
    owned: npt.NDArray[np.bool_]  # the positions whose owner this placing wrote to its rows


class UsagePending:
    """Each workload's use per day not yet in the database."""

    def __init__(self) -> None:
        self._days: dict[str, _Day] = {}
        self._placed: _Placed | None = None
        self._rows_of: tuple[Layout, list[str], npt.NDArray[np.intp]] | None = None

    def add(
        self,
        day: str,
        hours: float,
        use: Mapping[str, tuple[float, float | None]],
        workloads: Sequence[Workload],
        idle: Mapping[str, int],
    ) -> None:
        """``hours`` of use for each workload with a GPU in ``use`` (``fresh_use``); ``idle``:
        workload id -> GPUs an over-provisioning advice names idle this tick."""
        placed = self._place(day, workloads)
        layout = placed.layout
        fresh = FreshUse.of(use)
        row = self._rows_in(layout, fresh)
        k = len(layout.workloads)
        present = row >= 0
        util = np.zeros(row.size, dtype=np.float64)  # a GPU without a fresh sample: 0 % where summed
        util[present] = fresh.util[row[present]]
        # bincount adds each workload's GPUs in order, as a Python sum would: the same figures.
        count = np.bincount(layout.group, present.astype(np.float64), minlength=k)
        total = np.bincount(layout.group, util, minlength=k)
        used = np.flatnonzero(count > 0)  # no data this tick is not idleness, nor use
        d, rows = placed.day, placed.rows[used]
        idle_now = np.zeros(k, dtype=np.int64)
        for wid, gpus in idle.items():
            at = placed.position.get(wid)
            if at is not None:
                idle_now[at] = gpus
        d.touched[rows] = True
        # The newest owner: the same while the same workload objects come, so written once.
        unowned = used[~placed.owned[used]]
        if unowned.size:
            where = placed.rows[unowned]
            d.user[where], d.team[where] = placed.user[unowned], placed.team[unowned]
            placed.owned[unowned] = True
        counts = d.counts[rows]
        counts[:, REQUESTED] = np.maximum(counts[:, REQUESTED], placed.requested[used])
        counts[:, HELD] = np.maximum(counts[:, HELD], placed.sizes[used])
        counts[:, IDLE] = np.maximum(counts[:, IDLE], idle_now[used])
        d.counts[rows] = counts
        d.hours[rows, HELD_H] += count[used] * hours
        d.hours[rows, BUSY_H] += total[used] / 100 * hours

    def _rows_in(self, layout: Layout, fresh: FreshUse) -> npt.NDArray[np.intp]:
        """Each layout GPU's row in ``fresh`` (-1: none); kept while the layout and the GPUs'
        list are the same objects (``UseReader`` hands back the same list while it can)."""
        kept = self._rows_of
        if kept is not None and kept[0] is layout and kept[1] is fresh.uuids:
            return kept[2]
        index = fresh.index()
        row = np.fromiter(map(index.get, layout.uuids, itertools.repeat(-1)), np.intp, len(layout.uuids))
        self._rows_of = (layout, fresh.uuids, row)
        return row

    def _place(self, day: str, workloads: Sequence[Workload]) -> _Placed:
        layout = LAYOUTS.of(workloads)
        placed = self._placed
        d = self._days.get(day)
        if placed is not None and placed.layout is layout and placed.day is d:
            return placed
        if d is None:
            d = self._days[day] = _Day()
        ws = layout.workloads
        placed = self._placed = _Placed(
            layout,
            d,
            d.rows(ws),
            np.fromiter((w.gpus_requested for w in ws), np.int64, len(ws)),
            layout.group_size.astype(np.int64),
            np.array([w.owner.user for w in ws], dtype=object),
            np.array([w.owner.team for w in ws], dtype=object),
            {w.id: i for i, w in enumerate(ws)},
            np.zeros(len(ws), dtype=np.bool_),
        )
        return placed

    def amounts(self) -> UsageRows:
        rows: list[UsageRow] = []
        for day, d in self._days.items():
            at = np.flatnonzero(d.touched)
            (req, held, idle), (held_h, busy_h) = d.counts[at].T.tolist(), d.hours[at].T.tolist()
            ids = map(list(d.index).__getitem__, at.tolist())
            users, teams = d.user[at].tolist(), d.team[at].tolist()
            rows.extend(
                zip(itertools.repeat(day), ids, users, teams, req, held, held_h, busy_h, idle, strict=False)
            )
        return UsageRows(rows)

    def clear(self) -> None:
        """Forget what is pending (once it is in the database: a failed flush keeps it). The day
        being added to keeps its rows: the next tick places the same workloads in them."""
        today = self._placed.day if self._placed is not None else None
        self._days = {day: d for day, d in self._days.items() if d is today}
        for d in self._days.values():
            d.reset()
