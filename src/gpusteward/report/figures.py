"""What a waste report shows, gathered from the ledger for one period and one team (or the cluster).

Every number comes from the ledger tables (``store.ledger``) and the actions table, so a report
and ``gpusteward backtest``/the loop that wrote the ledger always agree.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from gpusteward.report.consolidation import ConsolidationSection
from gpusteward.report.faults import FaultSection
from gpusteward.report.insight_rows import InsightRow
from gpusteward.report.interruptions import InterruptionSection
from gpusteward.report.queue import QueueSection
from gpusteward.report.showback import ShowbackSection
from gpusteward.report.spot import SpotSection
from gpusteward.store.ledger import DailyRow, LedgerStore, StopRow, UsageRow

#: Efficiency buckets: 0-10 %, 10-20 % ... 90-100 % of held GPU-hours that were busy.
BUCKETS = tuple(f"{10 * i}-{10 * i + 10}%" for i in range(10))
TOP_WASTERS = 10
RECENT_STOPS = 50


@dataclass(frozen=True, slots=True)
class Waster:
    user: str
    team: str
    gpu_hours: float
    cost: float


@dataclass(frozen=True, slots=True)
class Advice:
    """Right-size advice for one owner, from the over-provisioned findings on their workloads."""

    user: str
    team: str
    workloads: tuple[str, ...]
    used: float
    requested: float

    @property
    def suggest(self) -> int:
        return max(1, math.ceil(self.used - 1e-9))

    @property
    def text(self) -> str:
        n = len(self.workloads)
        return (
            f"your {'job' if n == 1 else f'{n} jobs'} used {_num(self.used)} of {_num(self.requested)} "
            f"requested GPUs on average: request {self.suggest}"
        )


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


@dataclass
class ReportData:
    scope: str  # "cluster" or the team's name
    start: date
    end: date  # exclusive
    currency: str
    rate: str
    waste_gpu_hours: float = 0.0
    waste_cost: float = 0.0
    waste_kwh: float = 0.0
    saved_gpu_hours: float = 0.0
    saved_cost: float = 0.0
    stops: int = 0
    held_gpu_hours: float = 0.0
    busy_gpu_hours: float = 0.0
    days: list[str] = field(default_factory=list)
    daily_waste_cost: list[float] = field(default_factory=list)
    daily_saved_cost: list[float] = field(default_factory=list)
    by_kind: list[tuple[str, float]] = field(default_factory=list)
    top_wasters: list[Waster] = field(default_factory=list)
    efficiency: list[float] = field(default_factory=list)  # held GPU-hours per bucket
    actions_by_level: dict[str, int] = field(default_factory=dict)
    recent_stops: list[StopRow] = field(default_factory=list)
    advice: list[Advice] = field(default_factory=list)
    #: Right-sizing and anomaly findings of the period (runtime/report/insights.py).
    insights: list[InsightRow] = field(default_factory=list)
    teams: list[str] = field(default_factory=list)
    #: The consolidation plan in force (report/consolidation.py); None: no section.
    consolidation: ConsolidationSection | None = None
    #: GPU-hours lost to failed GPUs (report/faults.py); None: no section.
    faults: FaultSection | None = None
    #: Queue time of the jobs started in the period (report/queue.py), cluster page only.
    queue: QueueSection | None = None
    #: The live safety figures (``RolloutBook.safety``), cluster page only; None: no section.
    safety: dict[str, Any] | None = None
    #: Per team (cluster) or owner (team page) held, used, wasted, reclaimed and spend (report/showback.py).
    showback: ShowbackSection | None = None
    #: Spot and reserved GPU-hours and their savings against on-demand (report/spot.py).
    spot: SpotSection | None = None
    #: Spot interruptions and checkpoint advice (report/interruptions.py), cluster page only.
    interruptions: InterruptionSection | None = None

    @property
    def efficiency_pct(self) -> float | None:
        """Busy share of the GPU-hours held, in percent."""
        return 100 * self.busy_gpu_hours / self.held_gpu_hours if self.held_gpu_hours > 0 else None


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def gather(
    ledger: LedgerStore, start: date, end: date, *, team: str | None = None, currency: str, rate: str
) -> ReportData:
    """The report of the days ``start`` <= day < ``end`` for ``team`` (None: the whole cluster)."""
    daily = [r for r in ledger.daily(start, end, team=team) if r.key.currency == currency]
    usage = ledger.usage(start, end, team=team)
    data = ReportData("cluster" if team is None else team, start, end, currency, rate)
    _money(data, daily)
    _use(data, usage)
    since, until = _midnight(start), _midnight(end)
    data.actions_by_level = ledger.actions_by_level(since, until, team=team)
    data.recent_stops = ledger.stops(since, until, team=team)[-RECENT_STOPS:]
    if team is None:
        data.teams = sorted(
            {r.key.team for r in daily if r.key.team} | {r.amounts.team for r in usage if r.amounts.team}
        )
    return data


def _money(data: ReportData, rows: Sequence[DailyRow]) -> None:
    per_day: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    kinds: dict[str, float] = defaultdict(float)
    owners: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        a = r.amounts
        data.waste_gpu_hours += a.waste_gpu_hours
        data.waste_cost += a.waste_cost
        data.waste_kwh += a.waste_kwh
        data.saved_gpu_hours += a.saved_gpu_hours
        data.saved_cost += a.saved_cost
        data.stops += a.stops
        per_day[r.key.day][0] += a.waste_cost
        per_day[r.key.day][1] += a.saved_cost
        if a.waste_cost or a.waste_gpu_hours:
            kinds[r.key.kind] += a.waste_cost
            owners[(r.key.user, r.key.team)][0] += a.waste_gpu_hours
            owners[(r.key.user, r.key.team)][1] += a.waste_cost
    day = data.start
    while day < data.end:
        key = day.isoformat()
        data.days.append(key)
        data.daily_waste_cost.append(per_day[key][0])
        data.daily_saved_cost.append(per_day[key][1])
        day += timedelta(days=1)
    data.by_kind = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    wasters = [Waster(u, t, h, c) for (u, t), (h, c) in owners.items()]
    data.top_wasters = sorted(wasters, key=lambda w: (-w.cost, -w.gpu_hours, w.user, w.team))[:TOP_WASTERS]


def _use(data: ReportData, rows: Sequence[UsageRow]) -> None:
    data.efficiency = [0.0] * len(BUCKETS)
    per_workload: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    advised: dict[str, tuple[str, str, int, int, int]] = {}
    for r in rows:
        a = r.amounts
        data.held_gpu_hours += a.held_gpu_hours
        data.busy_gpu_hours += a.busy_gpu_hours
        per_workload[r.key.workload_id][0] += a.held_gpu_hours
        per_workload[r.key.workload_id][1] += a.busy_gpu_hours
        if a.advise_idle_gpus > 0:
            prev = advised.get(r.key.workload_id)
            idle = max(a.advise_idle_gpus, prev[4] if prev else 0)
            held = max(a.gpus_held, prev[3] if prev else 0)
            asked = max(a.gpus_requested or a.gpus_held, prev[2] if prev else 0)
            advised[r.key.workload_id] = (a.user, a.team, asked, held, idle)
    for held_h, busy_h in per_workload.values():
        if held_h > 0:
            data.efficiency[min(len(BUCKETS) - 1, int(10 * busy_h / held_h))] += held_h
    by_owner: dict[tuple[str, str], list[tuple[str, int, int]]] = defaultdict(list)
    for wid, (user, team, asked, held, idle) in sorted(advised.items()):
        by_owner[(user, team)].append((wid, asked, max(0, held - idle)))
    data.advice = sorted(
        (
            Advice(
                user,
                team,
                tuple(w for w, _, _ in jobs),
                used=sum(u for _, _, u in jobs) / len(jobs),
                requested=sum(a for _, a, _ in jobs) / len(jobs),
            )
            for (user, team), jobs in by_owner.items()
        ),
        key=lambda a: (a.used - a.requested, a.user),
    )
