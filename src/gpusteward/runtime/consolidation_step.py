"""The consolidation step of the tick (L4): light services from whole GPUs onto a shared one.

History: the window holds hours, a day profile needs a day. So every replica (analyse phase)
keeps, in memory, one reading a minute of each single-GPU workload's utilisation and memory for
``history_hours`` (taken from the window's last sample of its GPU), and nothing is planned until
``min_history_hours`` are covered. Not persisted: after a restart the history is gathered again,
which only delays a plan. Workloads already moved (the integration reports their shared resource
in the ``gpusteward.io/shared-as`` tag) are left out of the history: their GPU is not theirs.

Plan (the leader, every ``plan_every_minutes``): the time-aware packing (analysis/consolidation)
over that history, then policy/consolidation.py turns it into at most one decision a tick. Act:
the integration's executor (Kubernetes: ``ConsolidationMover``) through the tick's one runner.
Watch: a move's GPU is watched for ``watch_minutes``; saturation beyond the bound rolls it back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from gpusteward.analysis.consolidation import Item, PackSettings, Plan, plan_time_aware, to_grid
from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.errors import ConfigError, StoreError
from gpusteward.domain.models import (
    PROTECT_KEY,
    ActionStatus,
    Decision,
    Gpu,
    Level,
    Metric,
    Owner,
    Workload,
    WorkloadKind,
    utc,
)
from gpusteward.domain.store_ports import Docs
from gpusteward.policy.consolidation import SHARE, UNSHARE, ConsolidationSettings, Move, plan_moves
from gpusteward.runtime.consolidation_doc import PLAN_KEY, plan_document
from gpusteward.runtime.runner import ActionResult
from gpusteward.store.window import WindowView

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)

#: The tag a moved workload carries (the Kubernetes source copies the owner's annotations).
SHARED_AS_KEY = "gpusteward.io/shared-as"


def pack_settings(s: ConsolidationSettings) -> PackSettings:
    return PackSettings(
        gpu_memory_mib=s.gpu_memory_gib * 1024.0,
        memory_margin=s.memory_margin,
        contention_share_max=s.contention_share_max,
        mixing_teams=frozenset(s.mix_teams),
        max_per_gpu=s.max_per_gpu,
        sharing=s.sharing,
    )


@dataclass
class ConsolidationStep:
    settings: ConsolidationSettings
    stale_after_s: float = 180.0
    #: Per workload: minute (epoch // 60) → (utilisation %, memory MiB), highest of the minute.
    _history: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    _items: dict[str, Item] = field(default_factory=dict)
    _first_minute: int | None = None
    #: Moves made or seen, by workload; their watch counts saturated and watched minutes.
    _moves: dict[str, Move] = field(default_factory=dict)
    _watched: dict[str, tuple[int, int]] = field(default_factory=dict)
    _planned_at: datetime | None = None
    #: What ``record`` last looked at (plan time, moves) and the content it last wrote.
    _recorded: tuple[datetime | None, tuple[str, ...]] | None = None
    _written: dict[str, Any] | None = None
    last: Plan | None = None

    # -- analyse (every replica) -----------------------------------------------------------------
    def observe(
        self, now: datetime, view: WindowView, gpus: Mapping[str, Gpu], workloads: Mapping[str, Workload]
    ) -> None:
        minute = int(now.timestamp() // 60)
        if self._first_minute is None:
            self._first_minute = minute
        util, mem, age = view.last(Metric.GPU_UTIL), view.last(Metric.MEM_USED), view.age_s()
        for w in workloads.values():
            if len(w.gpu_uuids) != 1:
                continue  # a workload on several GPUs needs them whole
            i = view.index_of(w.gpu_uuids[0])
            if i is None or not (age[i] <= self.stale_after_s and np.isfinite(util[i])):
                continue
            shared = w.tag(SHARED_AS_KEY)
            if shared:
                self._watch(now, w.id, shared, float(util[i]) >= self.settings.saturated_util_pct)
                continue
            m = float(mem[i]) if np.isfinite(mem[i]) else 0.0
            row = self._history.setdefault(w.id, {})
            u0, m0 = row.get(minute, (0.0, 0.0))
            row[minute] = (max(u0, float(util[i])), max(m0, m))
            gpu = gpus.get(w.gpu_uuids[0])
            self._items[w.id] = Item(
                id=w.id,
                team=w.owner.team,
                gpu_model=gpu.model if gpu else "",
                pinned=(w.tag(PROTECT_KEY) or "").strip().lower() == "true",
                anti_affinity=frozenset(
                    {f"{self.settings.anti_affinity_label}={v}"}
                    if (v := w.labels.get(self.settings.anti_affinity_label))
                    else ()
                ),
            )
        self._forget(minute, workloads)

    def _watch(self, now: datetime, wid: str, resource: str, saturated: bool) -> None:
        move = self._moves.get(wid)
        if move is None or move.resource != resource:
            # Moved before this process started: watched from now on.
            move = self._moves[wid] = Move(wid, resource, now)
            self._watched[wid] = (0, 0)
        hot, seen = self._watched.get(wid, (0, 0))
        hot, seen = hot + int(saturated), seen + 1
        self._watched[wid] = (hot, seen)
        self._moves[wid] = replace(move, contention_share=hot / seen)

    def _forget(self, minute: int, workloads: Mapping[str, Workload]) -> None:
        keep_from = minute - int(self.settings.history_hours * 60)
        for wid in list(self._history):
            row = self._history[wid]
            for k in [k for k in row if k < keep_from]:
                del row[k]
            if not row:
                del self._history[wid]
                self._items.pop(wid, None)
        for wid in [w for w in self._moves if w not in workloads]:
            del self._moves[wid]
            self._watched.pop(wid, None)

    def covered_hours(self, now: datetime) -> float:
        if self._first_minute is None:
            return 0.0
        return (now.timestamp() / 60 - self._first_minute) / 60

    # -- plan (the leader) ----------------------------------------------------------------------
    def packing(self, now: datetime) -> Plan | None:
        """The packing over the history kept (None before ``min_history_hours``)."""
        s = self.settings
        if self.covered_hours(now) < s.min_history_hours or not self._history:
            return None
        ids = tuple(sorted(self._history))
        t, w, u, m = [], [], [], []
        for k, wid in enumerate(ids):
            for minute, (util, mem) in self._history[wid].items():
                t.append(minute * 60.0)
                w.append(k)
                u.append(util)
                m.append(mem)
        start = min(t)
        usage = to_grid(t, w, u, m, ids, start=start, end=max(t) + 60.0, step_s=60.0)
        return plan_time_aware(usage, [self._items[i] for i in ids], pack_settings(s))

    def plan(self, now: datetime, workloads: Mapping[str, Workload], paused: bool) -> list[Decision]:
        """At most one move (or rollback) this tick."""
        due = self._planned_at is None or now - self._planned_at >= timedelta(
            minutes=self.settings.plan_every_minutes
        )
        if due:
            try:
                plan = self.packing(now)
            except Exception:  # a plan must not fail the tick: nothing moves
                log.exception("consolidation plan failed; nothing is moved this tick")
                plan = None
            if plan is not None:
                self.last, self._planned_at = plan, now
        incarnations = {
            wid: w.incarnation
            for wid, w in workloads.items()
            if wid in self._items and not self._items[wid].pinned and not w.tag(SHARED_AS_KEY)
        }
        groups = self.last.groups if self.last is not None else None
        return plan_moves(groups, incarnations, list(self._moves.values()), now, self.settings, paused=paused)

    def settle(self, now: datetime, results: Sequence[ActionResult]) -> None:
        """A move that ran is watched from now; a rollback ends its watch."""
        for r in results:
            d = r.decision
            if r.status is not ActionStatus.SUCCEEDED:
                continue
            if d.step == SHARE.name:
                self._moves[d.workload_id] = Move(d.workload_id, self.settings.resource, now)
                self._watched[d.workload_id] = (0, 0)
                self._history.pop(d.workload_id, None)
            elif d.step == UNSHARE.name:
                self._moves.pop(d.workload_id, None)
                self._watched.pop(d.workload_id, None)

    def record(self, now: datetime, store: Docs, prices: PriceTable) -> None:
        """The leader's record phase: the plan in force as a document, written when it changed."""
        if self.last is None or self._planned_at is None:
            return
        seen = (self._planned_at, tuple(sorted(self._moves)))
        if seen == self._recorded:
            return  # neither a new plan nor a new move since the last look
        doc = plan_document(
            self.last,
            self._items,
            self._moves,
            prices,
            resource=self.settings.resource,
            planned_at=self._planned_at,
        )
        content = {k: v for k, v in doc.items() if k != "planned_at"}
        if content != self._written:
            try:
                store.save_doc(PLAN_KEY, doc, at=now)
            except StoreError:  # after the actions: the next tick tries again
                log.exception("consolidation plan not stored; tried again next tick")
                return
            self._written = content
        self._recorded = seen

    def summary(self) -> dict[str, Any] | None:
        """The last plan for the web and the report: GPUs now and after, by team; who moved."""
        plan = self.last
        if plan is None:
            return None
        by_team: dict[str, dict[str, int]] = {}
        for g in plan.groups:
            item = self._items.get(g.members[0])
            row = by_team.setdefault((item.team if item else "") or "(no team)", {"now": 0, "after": 0})
            row["now"] += len(g.members)
            row["after"] += 1
        return {
            "gpus_before": plan.gpus_before,
            "gpus_after": plan.gpus_after,
            "groups": [list(g.members) for g in plan.groups if len(g.members) > 1],
            "by_team": dict(sorted(by_team.items())),
            "moved": sorted(self._moves),
        }


def build_consolidation(settings: Settings, integration: Integration) -> ConsolidationStep | None:
    """The step when ``consolidation.enabled``; refused where no executor can move a workload."""
    s = settings.consolidation
    if not s.enabled:
        return None
    probe = Workload(
        "probe",
        WorkloadKind.POD,
        "probe",
        Owner("", ""),
        1,
        (),
        utc(0),
        integration.name,
        ref={"mode": "scale"},
    )
    if not any(e.supports(probe, Level.INFRA) for e in integration.executors):
        raise ConfigError(
            f"consolidation.enabled: source {integration.name!r} cannot move workloads onto shared GPUs; "
            "use kubernetes (Slurm and plain servers: the advice of `gpusteward consolidate plan`)"
        )
    return ConsolidationStep(s, stale_after_s=settings.analysis.stale_after_seconds)
