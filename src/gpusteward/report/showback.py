"""The report's Showback section (issue 19): over the report's period, GPU-hours held, used,
wasted and reclaimed and the spend (plus measured power) per team on the cluster page, per owner
on a team's page, with the cost per day stacked by team or owner. From the ledger's showback rows
(``analysis.showback``); a page without rows has no section.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta

from gpusteward.analysis.showback import team_label
from gpusteward.domain.records import ShowbackAmounts, add_showback
from gpusteward.domain.store_ports import Ledger
from gpusteward.report.charts import stacked_bar_chart


@dataclass(frozen=True, slots=True)
class ShowbackLine:
    #: The team (cluster page) or the owner (a team's page).
    who: str
    amounts: ShowbackAmounts

    @property
    def cost(self) -> float:
        return self.amounts.spend + self.amounts.power_cost

    @property
    def used_pct(self) -> float | None:
        held = self.amounts.held_gpu_hours
        return 100 * self.amounts.used_gpu_hours / held if held > 0 else None


@dataclass(slots=True)
class ShowbackSection:
    #: "team" on the cluster page, "owner" on a team's.
    by: str
    lines: list[ShowbackLine] = field(default_factory=list)
    total: ShowbackAmounts = field(default_factory=ShowbackAmounts)
    days: list[str] = field(default_factory=list)
    #: Per line (same order), its cost on each day.
    daily: dict[str, list[float]] = field(default_factory=dict)

    @property
    def total_cost(self) -> float:
        return self.total.spend + self.total.power_cost

    def chart(self, currency: str) -> str:
        return stacked_bar_chart(
            [d[5:] for d in self.days],
            self.daily,
            title=f"Cost per day by {self.by} ({currency})",
            unit=currency,
        )


def gather_showback(
    ledger: Ledger, start: date, end: date, *, team: str | None = None
) -> ShowbackSection | None:
    """The section for ``start`` <= day < ``end``, of the cluster or of one team; None: no rows."""
    rows = ledger.showback(start, end, team=team)
    if not rows:
        return None
    by = "team" if team is None else "owner"
    section = ShowbackSection(by)
    amounts: dict[str, ShowbackAmounts] = {}
    cost: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        who = team_label(r.key.team) if team is None else r.key.user
        add_showback(amounts.setdefault(who, ShowbackAmounts()), r.amounts)
        add_showback(section.total, r.amounts)
        cost[who][r.key.day] += r.amounts.spend + r.amounts.power_cost
    section.lines = sorted((ShowbackLine(w, a) for w, a in amounts.items()), key=lambda x: (-x.cost, x.who))
    section.days = [(start + timedelta(days=i)).isoformat() for i in range((end - start).days)]
    section.daily = {x.who: [cost[x.who].get(d, 0.0) for d in section.days] for x in section.lines}
    return section
