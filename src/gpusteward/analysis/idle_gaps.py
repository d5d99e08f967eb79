"""Idle-gap survival: per workload, what followed its past idle spells, pooled with its class.

The event is the scoring contract's, not "the zero run broke": a stop at time t is a false
kill when the workload is busy (>= ``busy_pct``) in at least ``busy_samples`` samples within
``horizon_s`` after t. A serving pod's evening drizzle breaks every zero run and yet is far
below that line (see the decision study): counting drizzle as "busy again" taught nothing.

A spell starts at the first idle sample after the workload was last busy again. When it has
lasted ``SPELL_BINS[k]``, a checkpoint opens: it counts the busy samples that follow and
resolves "busy again" at ``busy_samples`` or "stayed quiet" after ``horizon_s``. The spell
ends when the workload is busy again in that sense: ``busy_samples`` within one of two
tumbling windows of ``horizon_s``, half a horizon apart (so a burst shorter than half a
horizon is always seen whole by one of them). Every update is O(bins) per workload
and vectorised over workloads; checkpoints left open when a workload goes are censored
(never counted), as are those open across a restart.

``odds`` answers P(busy again within the horizon | idle for d so far) from the largest bin
<= d (smaller spells come back more often, so this errs towards waiting): the workload's own
counts with its class's counts (less its own) as a Beta prior of at most ``prior_weight``
gaps, and a one-sided 95 % Wilson upper bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusteward.domain.classes import CLASSES

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

#: Spell lengths (seconds) at which a checkpoint opens: 0, 10 min, ..., 24 h.
SPELL_BINS: FloatArray = np.array([0, 10, 30, 60, 90, 120, 180, 240, 360, 480, 720, 1440], float) * 60.0
Z95 = 1.6448536269514722  # one-sided 95 %


@dataclass(frozen=True)
class GapOdds:
    """Per workload: P(busy again within the horizon), its upper bound, the gaps behind it
    (own plus the class prior's weight) and how long the current spell has lasted (s).
    NaN where the workload is not in an idle spell or nothing is known."""

    p: FloatArray
    upper: FloatArray
    gaps: FloatArray
    idle_s: FloatArray


def wilson_upper(p: FloatArray, n: FloatArray, z: float = Z95) -> FloatArray:
    """Upper Wilson bound of a proportion ``p`` seen over ``n`` trials (NaN where n <= 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        z2n = z * z / n
        centre = p + z2n / 2.0
        spread = z * np.sqrt(np.maximum(p * (1.0 - p), 0.0) / n + z2n / (4.0 * n))
        out: FloatArray = np.where(n > 0, np.minimum((centre + spread) / (1.0 + z2n), 1.0), np.nan)
    return out


class GapBook:
    """The streaming record for one horizon (see the module's docstring)."""

    def __init__(
        self,
        horizon_s: float,
        busy_pct: float = 1.0,
        busy_samples: float = 10.0,
        prior_weight: float = 20.0,
    ) -> None:
        self.horizon_s, self.busy_pct = float(horizon_s), float(busy_pct)
        self.busy_samples, self.prior_weight = float(busy_samples), float(prior_weight)
        self.rows: dict[str, int] = {}
        nb = SPELL_BINS.size
        self.cls: IntArray = np.zeros(0, np.intp)
        self.spell: FloatArray = np.zeros(0)  # spell start (epoch s); NaN: not in a spell
        self.next_bin: IntArray = np.zeros(0, np.intp)
        self.tail_at: FloatArray = np.zeros((0, 2))  # the spell's two tumbling windows
        self.tail_cnt: FloatArray = np.zeros((0, 2))
        self.open_at: FloatArray = np.zeros((0, nb))  # checkpoint opened at; NaN: none open
        self.open_cnt: FloatArray = np.zeros((0, nb))
        self.reached: FloatArray = np.zeros((0, nb))
        self.busy: FloatArray = np.zeros((0, nb))
        self.class_reached: FloatArray = np.zeros((len(CLASSES), nb))
        self.class_busy: FloatArray = np.zeros((len(CLASSES), nb))

    def _row_of(self, ids: Sequence[str], classes: IntArray) -> IntArray:
        rows = self.rows
        new = [i for i, w in enumerate(ids) if w not in rows]
        if new:
            n0 = len(rows)
            for j, i in enumerate(new):
                rows[ids[i]] = n0 + j
            self._grow(len(new))
        out = np.fromiter((rows[w] for w in ids), np.intp, len(ids))
        self.cls[out] = classes  # a workload's class may be learnt late (behaviour)
        return out

    def _grow(self, k: int) -> None:
        nb = SPELL_BINS.size
        self.cls = np.concatenate([self.cls, np.zeros(k, np.intp)])
        self.spell = np.concatenate([self.spell, np.full(k, np.nan)])
        self.next_bin = np.concatenate([self.next_bin, np.zeros(k, np.intp)])
        self.tail_at = np.vstack([self.tail_at, np.full((k, 2), np.nan)])
        self.tail_cnt = np.vstack([self.tail_cnt, np.zeros((k, 2))])
        self.open_at = np.vstack([self.open_at, np.full((k, nb), np.nan)])
        for name in ("open_cnt", "reached", "busy"):
            setattr(self, name, np.vstack([getattr(self, name), np.zeros((k, nb))]))

    def update(
        self,
        now_s: float,
        ids: Sequence[str],
        classes: IntArray,
        busy_count: FloatArray,
        idle_now: BoolArray,
    ) -> None:
        """Fold in, per workload seen this tick, its busy samples since the last update and
        whether its newest sample is idle. Workloads without a new sample are left out."""
        if not ids:
            return
        r = self._row_of(ids, classes)
        open_at = self.open_at[r]
        is_open = ~np.isnan(open_at)
        cnt = self.open_cnt[r] + np.where(is_open, busy_count[:, None], 0.0)
        yes = is_open & (cnt >= self.busy_samples)
        done = yes | (is_open & (now_s - open_at >= self.horizon_s))
        self.reached[r] += done
        self.busy[r] += yes
        np.add.at(self.class_reached, self.cls[r], done.astype(float))
        np.add.at(self.class_busy, self.cls[r], yes.astype(float))
        cnt[done] = 0.0
        open_at[done] = np.nan
        spell = self.spell[r]
        h = self.horizon_s
        tail_at, tail_cnt = self.tail_at[r], self.tail_cnt[r]
        roll = ~np.isnan(tail_at) & (now_s - tail_at >= h)
        tail_at[roll] += np.floor((now_s - tail_at[roll]) / h) * h
        tail_cnt[roll] = 0.0
        tail_cnt += busy_count[:, None]
        ended = ~np.isnan(spell) & (tail_cnt >= self.busy_samples).any(axis=1)
        spell[ended] = np.nan
        start = np.isnan(spell) & idle_now
        spell[start] = now_s
        tail_at[start] = now_s - np.array([0.0, h / 2.0])
        tail_cnt[start] = 0.0
        nxt = np.where(start, 0, self.next_bin[r])
        age = now_s - spell  # NaN outside a spell: no checkpoint opens
        for k, d in enumerate(SPELL_BINS.tolist()):
            due = (nxt == k) & (age >= d)
            if not due.any():
                continue
            free = due & np.isnan(open_at[:, k])  # one checkpoint per bin at a time
            open_at[free, k] = now_s
            cnt[free, k] = 0.0
            nxt[due] = k + 1
        self.open_at[r], self.open_cnt[r], self.spell[r], self.next_bin[r] = open_at, cnt, spell, nxt
        self.tail_at[r], self.tail_cnt[r] = tail_at, tail_cnt

    def odds(self, ids: Sequence[str], classes: IntArray, now_s: float) -> GapOdds:
        n = len(ids)
        rows = np.fromiter((self.rows.get(w, -1) for w in ids), np.intp, n)
        have = rows >= 0
        r = np.where(have, rows, 0)
        idle_s = np.where(have, now_s - self.spell[r] if self.spell.size else np.nan, np.nan)
        k = np.searchsorted(SPELL_BINS, np.nan_to_num(idle_s, nan=-1.0), side="right") - 1
        kk = np.maximum(k, 0)
        known = have & (k >= 0)
        own_n = np.where(known, self.reached[r, kk] if self.reached.size else 0.0, 0.0)
        own_y = np.where(known, self.busy[r, kk] if self.busy.size else 0.0, 0.0)
        cls_n = np.maximum(self.class_reached[classes, kk] - own_n, 0.0)
        cls_y = np.clip(self.class_busy[classes, kk] - own_y, 0.0, cls_n)
        w = np.where(np.isnan(idle_s), 0.0, np.minimum(cls_n, self.prior_weight))
        prior = (cls_y + 0.5) / (cls_n + 1.0)
        gaps = own_n + w
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(gaps > 0, (own_y + w * prior) / gaps, np.nan)
        p = np.where(np.isnan(idle_s), np.nan, p)
        return GapOdds(p, wilson_upper(p, gaps), np.where(np.isnan(idle_s), np.nan, gaps), idle_s)

    # -- persistence: counts only; open spells and checkpoints are censored by a restart --

    def to_data(self) -> dict[str, Any]:
        keep = self.reached.sum(axis=1) > 0
        ids = [w for w, i in self.rows.items() if keep[i]]
        idx = np.fromiter((self.rows[w] for w in ids), np.intp, len(ids))
        return {
            "horizon_s": self.horizon_s,
            "bins_s": SPELL_BINS.tolist(),
            "workloads": {
                w: [int(self.cls[i]), self.reached[i].tolist(), self.busy[i].tolist()]
                for w, i in zip(ids, idx.tolist(), strict=True)
            },
            "class_reached": dict(zip(CLASSES, self.class_reached.tolist(), strict=True)),
            "class_busy": dict(zip(CLASSES, self.class_busy.tolist(), strict=True)),
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """Counts saved by ``to_data`` (ignored when saved for other bins or horizon)."""
        if list(data.get("bins_s", ())) != SPELL_BINS.tolist() or data.get("horizon_s") != self.horizon_s:
            return
        for c, name in enumerate(CLASSES):
            self.class_reached[c] = np.asarray(data["class_reached"].get(name, self.class_reached[c]), float)
            self.class_busy[c] = np.asarray(data["class_busy"].get(name, self.class_busy[c]), float)
        per: Mapping[str, Any] = data.get("workloads", {})
        ids = list(per)
        r = self._row_of(ids, np.fromiter((int(per[w][0]) for w in ids), np.intp, len(ids)))
        for i, w in zip(r.tolist(), ids, strict=True):
            self.reached[i] = np.asarray(per[w][1], float)
            self.busy[i] = np.asarray(per[w][2], float)

    def forget(self, keep: set[str]) -> None:
        """Drop the rows of workloads not in ``keep`` (their counts stay in the class's)."""
        gone = [w for w in self.rows if w not in keep]
        if not gone:
            return
        idx = np.fromiter((self.rows[w] for w in keep if w in self.rows), np.intp)
        idx.sort()
        old = {i: w for w, i in self.rows.items()}
        self.rows = {old[i]: j for j, i in enumerate(idx.tolist())}
        for name in (
            "cls",
            "spell",
            "next_bin",
            "tail_at",
            "tail_cnt",
            "open_at",
            "open_cnt",
            "reached",
            "busy",
        ):
            setattr(self, name, getattr(self, name)[idx])
