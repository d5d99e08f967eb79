"""The report's spot savings (issues 18 and 19): per team on the cluster page and per owner on a
team's page, the GPU-hours held on spot and on reserved capacity and the money they saved against
the on-demand price of the same GPU-hours. From the ledger's showback rows (their rate is the
node's instance lifecycle, or ``cost.rate``) and the price table's on-demand price per GPU model;
a page whose rows are all on-demand has no section.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.showback import team_label
from gpusteward.domain.records import ShowbackRow
from gpusteward.domain.store_ports import Ledger


@dataclass(slots=True)
class SpotLine:
    #: The team (cluster page), the owner (a team's page), or "all".
    who: str
    held_gpu_hours: float = 0.0
    spot_gpu_hours: float = 0.0
    reserved_gpu_hours: float = 0.0
    #: What the spot and reserved GPU-hours cost at their rates, and would have cost on demand.
    paid: float = 0.0
    on_demand_price: float = 0.0

    @property
    def saved(self) -> float:
        return self.on_demand_price - self.paid

    @property
    def spot_share_pct(self) -> float | None:
        return 100 * self.spot_gpu_hours / self.held_gpu_hours if self.held_gpu_hours > 0 else None

    def add(self, row: ShowbackRow, on_demand_per_hour: float) -> None:
        a = row.amounts
        self.held_gpu_hours += a.held_gpu_hours
        if row.key.rate == "spot":
            self.spot_gpu_hours += a.held_gpu_hours
        elif row.key.rate == "reserved":
            self.reserved_gpu_hours += a.held_gpu_hours
        else:
            return
        self.paid += a.spend
        self.on_demand_price += a.held_gpu_hours * on_demand_per_hour


@dataclass(slots=True)
class SpotSection:
    #: "team" on the cluster page, "owner" on a team's.
    by: str
    currency: str
    lines: list[SpotLine] = field(default_factory=list)
    total: SpotLine = field(default_factory=lambda: SpotLine("all"))

    @property
    def sentence(self) -> str:
        t, c = self.total, self.currency
        share = t.spot_share_pct or 0.0
        return (
            f"{share:.0f} % of the {t.held_gpu_hours:,.1f} GPU-hours held ran on spot "
            f"({t.spot_gpu_hours:,.1f} GPU-hours) and {t.reserved_gpu_hours:,.1f} on reserved capacity; "
            f"they cost {t.paid:,.2f} {c} instead of {t.on_demand_price:,.2f} {c} on demand: "
            f"{t.saved:,.2f} {c} saved."
        )


def spot_lines(
    rows: Iterable[ShowbackRow], prices: PriceTable, *, by: str = "team", currency: str = "USD"
) -> SpotSection | None:
    """Rows added up per team (``by="team"``) or owner; None when none is on spot or reserved."""
    section = SpotSection(by, currency)
    lines: dict[str, SpotLine] = {}
    for r in rows:
        who = team_label(r.key.team) if by == "team" else r.key.user
        per_hour = prices.price(r.key.gpu_model, "on-demand")
        lines.setdefault(who, SpotLine(who)).add(r, per_hour)
        section.total.add(r, per_hour)
    if section.total.spot_gpu_hours + section.total.reserved_gpu_hours <= 0:
        return None
    section.lines = sorted(lines.values(), key=lambda x: (-x.saved, x.who))
    return section


def gather_spot(
    ledger: Ledger, start: date, end: date, prices: PriceTable, *, team: str | None = None
) -> SpotSection | None:
    """The section for ``start`` <= day < ``end``, of the cluster or of one team."""
    rows = ledger.showback(start, end, team=team)
    return spot_lines(rows, prices, by="team" if team is None else "owner", currency=prices.currency)
