"""Each tick's findings, GPU use and succeeded stops, turned into the daily ledger (``store.ledger``).

* **Waste**: the GPU-hours of every GPU in a finding, from where the finding says the waste
  began (or where this GPU was last counted, whichever is later) to the tick, priced at the
  GPU's rate plus, with an electricity price, its measured power draw. Counted per GPU, so two
  rules tripping on one GPU count its time once; marks in the database keep it exact across
  restarts.
* **Savings**: a succeeded stop (L2 and above) is credited with its GPUs from the stop until
  ``savings_end`` says the workload would have ended: by default ``cost.savings_horizon_hours``
  later (an estimate, the live loop cannot know); a backtest passes what the trace shows.
* **Use**: per workload and day, the GPU-hours held and the utilisation-weighted busy GPU-hours
  of the samples the source had (efficiency), and the GPUs an advice rule found idle.
* **Showback** (runtime/showback_recorder.py): per day, team, owner, GPU model and rate (the node's
  instance lifecycle where known): GPU-hours held (unheld GPUs: "(unallocated)"),
  used, wasted, reclaimed; the held hours' spend at the GPU's price, the measured power's cost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from gpusteward.analysis.cost import RATES, PriceTable, Rate
from gpusteward.domain.cloud import InstanceControl
from gpusteward.domain.models import (
    ActionStatus,
    Finding,
    Gpu,
    Level,
    Observation,
    Owner,
    RuleAction,
    Workload,
)
from gpusteward.domain.records import (
    DailyAmounts,
    DailyKey,
    Mark,
    day_key,
)
from gpusteward.domain.sample_table import latest
from gpusteward.domain.store_ports import HasLedger, WorkloadBook
from gpusteward.runtime.fresh_use import UseReader
from gpusteward.runtime.runner import ActionResult
from gpusteward.runtime.showback_recorder import (
    NOBODY,
    RECLAIMED,
    UNKNOWN_MODEL,
    WASTED,
    NodeRates,
    ShowbackPending,
    model_of,
)
from gpusteward.runtime.usage_pending import UsagePending

log = logging.getLogger(__name__)

#: When the stopped workload would have ended (None: nothing saved), given it and the stop time.
SavingsEnd = Callable[[Workload, datetime], datetime | None]

_WASTE = "waste:"
_SAVED = "saved:"
#: A finished savings mark is kept this long, so a later step on the same stop is not credited again.
_KEEP_DONE = timedelta(days=7)


def _rate(saved: object, default: Rate) -> Rate:
    """A stop's rate as its mark saved it (marks older than rates have none)."""
    return next((r for r in RATES if r == saved), default)


class RecorderStore(WorkloadBook, HasLedger, Protocol):
    """The ledger, and the snapshots of workloads that left before their stop was credited."""


def split_days(start: datetime, end: datetime) -> list[tuple[str, float]]:
    """Hours of [start, end) in each UTC day, as (YYYY-MM-DD, hours)."""
    if start < end and start.date() == end.date():  # within a day (nearly every tick's span)
        return [(day_key(start), (end - start).total_seconds() / 3600)]
    out = []
    t = start
    while t < end:
        midnight = datetime(t.year, t.month, t.day, tzinfo=t.tzinfo) + timedelta(days=1)
        upto = min(end, midnight)
        out.append((day_key(t), (upto - t).total_seconds() / 3600))
        t = upto
    return out


class LedgerRecorder:
    """Accumulates ledger amounts in memory and adds them to the database every ``flush_every_s``
    (0: every tick), at each UTC day's first tick and when the loop stops. If a flush fails, the
    amounts wait for the next one.

    A crash between flushes loses little: marks are written in the same transaction as their
    amounts, and the next recorder counts waste and savings on from the marks, as far back as a
    finding says its waste began. Lost are the unwritten use and held hours (as while an agent is
    down) and the waste of an idle spell that ended before the crash: keep ``flush_every_s``
    well under the rules' windows."""

    def __init__(
        self,
        store: RecorderStore,
        prices: PriceTable,
        *,
        flush_every_s: float = 0.0,
        max_gap_s: float = 900.0,
        savings_end: SavingsEnd | None = None,
        instances: InstanceControl | None = None,
    ) -> None:
        self.ledger = store.ledger
        self.store = store
        self.prices = prices
        self.flush_every_s = flush_every_s
        #: The longest time between two ticks counted as use (an agent that was down saw nothing).
        self.max_gap_s = max_gap_s
        self.savings_end: SavingsEnd = savings_end or self._horizon
        #: Each node's rate from its cloud instance (``instances``), read once a tick.
        self.rates = NodeRates(instances)
        self._kinds: dict[str, str] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the marks read and the amounts not yet written: leadership changed hands, and
        the other replica may have counted since. The marks are read again at the next tick, so
        waste and savings go on from what was written; unwritten use is lost, as while down."""
        self._loaded = False
        #: Waste counted per GPU up to this time.
        self._waste_until: dict[str, datetime] = {}
        #: Stops still accruing savings: key → (counted until, ends, what for).
        self._active: dict[str, tuple[datetime, datetime, dict[str, Any]]] = {}
        #: Stops done accruing, kept a while so a later step is not credited again: key → ends.
        self._done: dict[str, datetime] = {}
        self._dirty: set[str] = set()
        self._dirty_waste: set[str] = set()  # GPUs whose waste mark moved (their keys: _WASTE + uuid)
        # Pending amounts (one tick adds thousands): plain lists by day and owner, numpy columns
        # per workload (runtime/usage_pending.py).
        self._daily: dict[DailyKey, list[float]] = {}
        # The same lists by (day, user, team, kind): a tuple is cheaper to hash than a DailyKey.
        self._daily_by: dict[tuple[str, str, str, str], list[float]] = {}
        self._usage = UsagePending()
        self._fresh = UseReader()
        self._showback = ShowbackPending(self.prices)
        self._prev_at: datetime | None = None
        self._flushed_at: datetime | None = None

    def _horizon(self, workload: Workload, at: datetime) -> datetime | None:
        hours = self.prices.savings_horizon_hours
        return at + timedelta(hours=hours) if hours > 0 else None

    def _load(self) -> None:
        if self._loaded:
            return
        for key, m in self.ledger.marks().items():
            if key.startswith(_WASTE):
                self._waste_until[key[len(_WASTE) :]] = m.until
            elif key.startswith(_SAVED):
                ends = datetime.fromisoformat(str(m.data["ends"]))
                if m.until < ends:
                    self._active[key] = (m.until, ends, dict(m.data))
                else:
                    self._done[key] = ends
        self._loaded = True

    def _row(self, key: DailyKey) -> list[float]:
        """The pending amounts of ``key`` (in ``DailyAmounts``' order), zero when new."""
        acc = self._daily.get(key)
        if acc is None:
            acc = self._daily[key] = [0.0] * 6
        return acc

    def _bump(self, key: DailyKey, amounts: tuple[float, float, float, float, float, float]) -> None:
        acc = self._row(key)
        for i, v in enumerate(amounts):
            acc[i] += v

    # -- one tick -----------------------------------------------------------------------------
    def record(
        self,
        now: datetime,
        obs: Observation | None,
        workloads: Mapping[str, Workload],
        findings: Sequence[Finding],
        actions: Sequence[ActionResult],
        gpus: Mapping[str, Gpu],
    ) -> None:
        self._load()
        self.rates.refresh(g.node for g in gpus.values())
        power = latest(obs.samples, "power_w") if obs else {}
        self._waste(findings, workloads, gpus, power)
        self._stops(now, actions, workloads, gpus, power)
        self._accrue(now)
        if obs is not None and self._prev_at is not None:
            hours = min(max(0.0, (now - self._prev_at).total_seconds()), self.max_gap_s) / 3600
            if hours > 0:
                use = self._fresh.read(obs.samples, self._prev_at)
                self._use(now, hours, use, workloads, findings)
                # Showback: each GPU with a fresh utilisation sample was held since the last tick.
                self._showback.held(day_key(now), hours, use, workloads, gpus, self.rates)
        self._prev_at = now
        due = self._flushed_at is None or (now - self._flushed_at).total_seconds() >= self.flush_every_s
        if due or day_key(now) != day_key(self._flushed_at or now):
            self.flush(now)

    def _price(self, uuid: str, gpus: Mapping[str, Gpu]) -> tuple[Rate, float]:
        """The rate and price of one GPU-hour of ``uuid``: its node's (``NodeRates``)."""
        return self.rates.price(self.prices, gpus.get(uuid))

    def _waste(
        self,
        findings: Sequence[Finding],
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        power: Mapping[str, float],
    ) -> None:
        until = self._waste_until
        # Reclaim findings first: a GPU in both a reclaim and an advice finding is the former's.
        for f in sorted(
            findings, key=lambda f: (f.action is not RuleAction.RECLAIM, f.rule, f.workload_id or "")
        ):
            self._kinds[f.rule] = f.kind
            prevs = list(map(until.get, f.gpu_uuids))
            if all(prev is not None and prev >= f.at for prev in prevs):
                continue  # counted up to the finding already: a second rule on the same GPUs
            w = workloads.get(f.workload_id or "")
            owner = w.owner if w is not None else NOBODY
            began = f.at - timedelta(minutes=max(0.0, f.wasted_minutes))
            # GPUs counted from the same time share its days (most often all of a finding's GPUs:
            # counted up to the last tick), so the days are split once for them.
            since: dict[datetime, list[str]] = {}
            for uuid, prev in zip(f.gpu_uuids, prevs, strict=True):
                start = began if prev is None or prev < began else prev
                if f.at > start:
                    since.setdefault(start, []).append(uuid)
            for start, uuids in since.items():
                self._count_waste(f, owner, start, uuids, gpus, power)
                until.update(dict.fromkeys(uuids, f.at))
                self._dirty_waste.update(uuids)

    def _count_waste(
        self,
        f: Finding,
        owner: Owner,
        start: datetime,
        uuids: list[str],
        gpus: Mapping[str, Gpu],
        power: Mapping[str, float],
    ) -> None:
        """The waste of ``uuids`` from ``start`` to the finding: each row adds its GPUs' amounts
        one by one, in the finding's order, as counting GPU by GPU does."""
        priced = [(*self._price(u, gpus), power.get(u), model_of(u, gpus)) for u in uuids]
        energy_cost, daily_by = self.prices.energy_cost, self._daily_by
        for day, hours in split_days(start, f.at):
            # Looked up by a plain tuple (cheaper to hash than the DailyKey it stands for).
            parts = (day, owner.user, owner.team, f.kind)
            acc = daily_by.get(parts)
            if acc is None:
                key = DailyKey(day, self.prices.currency, owner.user, owner.team, f.kind)
                acc = daily_by[parts] = self._row(key)
            shown: dict[tuple[str, Rate], list[float]] = {}  # showback's row per model and rate
            for rate, price, watts, model in priced:
                kwh = watts / 1000 * hours if watts is not None else 0.0
                acc[0] += hours
                acc[1] += hours * price + energy_cost(kwh)
                acc[2] += kwh
                row = shown.get((model, rate))
                if row is None:
                    row = shown[model, rate] = self._showback.acc(day, owner, model, rate)
                row[WASTED] += hours

    def _stops(
        self,
        now: datetime,
        actions: Sequence[ActionResult],
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        power: Mapping[str, float],
    ) -> None:
        for r in actions:
            d = r.decision
            if r.status is not ActionStatus.SUCCEEDED or d.level < Level.GRACEFUL_STOP:
                continue
            # A two-phase stop succeeds at its follow-up, often after the workload has left the
            # source (it ended on the checkpoint signal): credit it from its stored snapshot.
            w = workloads.get(d.workload_id)
            if w is None:
                rec = self.store.workload_info(d.workload_id)
                if rec is None:
                    continue
                w = rec.to_workload()
            key = f"{_SAVED}{w.id}:{w.incarnation}"
            if key in self._active or key in self._done:
                continue  # a force after a graceful stop frees the same GPUs once
            kind = self._kinds.get(d.rule, d.rule or "stop")
            day = DailyKey(day_key(now), self.prices.currency, w.owner.user, w.owner.team, kind)
            self._bump(day, (0.0, 0.0, 0.0, 0.0, 0.0, 1.0))
            end = self.savings_end(w, now) or now
            watts = [power[u] for u in w.gpu_uuids if u in power]
            data = {
                "user": w.owner.user,
                "team": w.owner.team,
                "kind": kind,
                "gpus": len(w.gpu_uuids),
                "price": sum(self._price(u, gpus)[1] for u in w.gpu_uuids),
                "rate": self._price(w.gpu_uuids[0], gpus)[0] if w.gpu_uuids else self.prices.rate,
                "kw": sum(watts) / 1000 if watts else None,
                "model": model_of(w.gpu_uuids[0], gpus) if w.gpu_uuids else UNKNOWN_MODEL,
                "ends": end.isoformat(),
            }
            if end > now:
                self._active[key] = (now, end, data)
            else:
                self._done[key] = end
            self._dirty.add(key)

    def _accrue(self, now: datetime) -> None:
        for key in sorted(self._active):
            since, ends, data = self._active[key]
            upto = min(now, ends)
            if upto <= since:
                continue
            kw = data.get("kw")
            for day, hours in split_days(since, upto):
                kwh = float(kw) * hours if kw is not None else 0.0
                gpu_hours = hours * int(data["gpus"])
                cost = hours * float(data["price"]) + self.prices.energy_cost(kwh)
                k = DailyKey(
                    day, self.prices.currency, str(data["user"]), str(data["team"]), str(data["kind"])
                )
                self._bump(k, (0.0, 0.0, 0.0, gpu_hours, cost, 0.0))
                owner = Owner(str(data["user"]), str(data["team"]))
                model, rate = str(data.get("model", UNKNOWN_MODEL)), _rate(data.get("rate"), self.prices.rate)
                self._showback.add(day, owner, model, rate, RECLAIMED, gpu_hours)
            self._dirty.add(key)
            if upto >= ends:
                del self._active[key]
                self._done[key] = ends
            else:
                self._active[key] = (upto, ends, data)

    def _use(
        self,
        now: datetime,
        hours: float,
        use: Mapping[str, tuple[float, float | None]],
        workloads: Mapping[str, Workload],
        findings: Sequence[Finding],
    ) -> None:
        idle: dict[str, int] = {}
        for f in findings:
            # Only over-provisioning advice names idle GPUs (anomalies and other advice name all).
            if f.action is RuleAction.ADVISE and f.workload_id and f.kind == "overprovisioned":
                idle[f.workload_id] = max(idle.get(f.workload_id, 0), len(f.gpu_uuids))
        self._usage.add(day_key(now), hours, use, list(workloads.values()), idle)

    def _marks(self) -> tuple[list[Mark], set[str]]:
        """The dirty marks to save, and the finished ones old enough to forget."""
        saved = [Mark(_WASTE + u, self._waste_until[u]) for u in sorted(self._dirty_waste)]
        for key in sorted(self._dirty):
            if key in self._active:
                since, _, data = self._active[key]
                saved.append(Mark(key, since, data))
            elif key in self._done:
                saved.append(Mark(key, self._done[key], {"ends": self._done[key].isoformat()}))
        horizon = (self._prev_at or datetime.now(tz=UTC)) - _KEEP_DONE
        old = {k for k, ends in self._done.items() if ends < horizon}
        return [m for m in saved if m.key not in old], old

    def flush(self, now: datetime | None = None, *, until: datetime | None = None) -> None:
        """Add what is pending to the database. ``until`` first accrues savings up to then (the
        end of a backtest)."""
        self._load()
        if until is not None:
            self._accrue(until)
        marks, old = self._marks()
        daily = {k: DailyAmounts(v[0], v[1], v[2], v[3], v[4], int(v[5])) for k, v in self._daily.items()}
        usage = self._usage.amounts()
        showback = self._showback.amounts()
        late_day = day_key(now or until or self._prev_at or datetime.now(tz=UTC))
        self.ledger.add(daily, usage, marks, old, showback=showback, late_day=late_day)
        for k in old:
            del self._done[k]
        self._daily, self._daily_by = {}, {}
        self._usage.clear()
        self._showback.clear()
        self._dirty, self._dirty_waste = set(), set()
        self._flushed_at = now or until or self._prev_at
