"""Render ``ReportData`` as a self-contained HTML page (Jinja2, charts as inline SVG) and write the
cluster report plus one per team."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Literal

import jinja2
from markupsafe import Markup

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.errors import ConfigError
from gpusteward.policy.consolidation import ConsolidationSettings
from gpusteward.policy.settings import PolicySettings
from gpusteward.report.charts import bar_chart, fmt, hbar_chart
from gpusteward.report.consolidation import gather_consolidation
from gpusteward.report.faults import gather_faults
from gpusteward.report.figures import BUCKETS, ReportData, gather
from gpusteward.report.insight_rows import gather_insights
from gpusteward.report.interruptions import gather_interruptions
from gpusteward.report.queue import duration, gather_queue
from gpusteward.report.showback import gather_showback
from gpusteward.report.spot import gather_spot
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.store.db import StateStore
from gpusteward.store.files import ensure_folder, write_text
from gpusteward.store.ledger import LedgerStore

Period = Literal["day", "week", "month"]
PERIOD_DAYS: dict[str, int] = {"day": 1, "week": 7, "month": 30}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpusteward.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt
    env.filters["money"] = lambda v: f"{v:,.2f}"
    env.filters["duration"] = duration
    return env


def _svg(markup: str) -> Markup:
    # Trusted: analysis.charts escapes every piece of text it puts into the SVG.
    return Markup(markup)  # noqa: S704


def charts(data: ReportData) -> dict[str, Markup]:
    """The report's charts as inline SVG."""
    c = data.currency
    plan = data.consolidation.chart() if data.consolidation is not None else ""
    return {
        "showback": _svg(data.showback.chart(c) if data.showback is not None else ""),
        "consolidation": _svg(plan),
        "daily": _svg(
            bar_chart(
                [d[5:] for d in data.days],
                {"waste": data.daily_waste_cost, "saved": data.daily_saved_cost},
                title=f"Waste and savings per day ({c})",
                unit=c,
            )
        ),
        "wasters": _svg(
            hbar_chart(
                [f"{w.user} ({w.team})" if w.team else w.user for w in data.top_wasters],
                [w.cost for w in data.top_wasters],
                title=f"Top wasters ({c})",
                unit=c,
            )
        ),
        "kinds": _svg(
            hbar_chart(
                [k for k, _ in data.by_kind],
                [v for _, v in data.by_kind],
                title=f"Waste by kind ({c})",
                unit=c,
            )
        ),
        "efficiency": _svg(
            bar_chart(
                list(BUCKETS),
                {"GPU-hours": data.efficiency or [0.0] * len(BUCKETS)},
                title="GPU efficiency: GPU-hours held, by the share of them busy",
                unit="GPU-h",
            )
        ),
    }


def render(data: ReportData, *, links: dict[str, str] | None = None) -> str:
    """One HTML page. ``links`` maps team name → file of its report (cluster page only)."""
    template = _env().get_template("report.html.j2")
    return template.render(data=data, charts=charts(data), links=links or {})


def slug(team: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", team).strip("-.")[:60] or "team"


def team_files(teams: Iterable[str]) -> dict[str, str]:
    """A distinct, safe file name per team. ``team-<name>.html`` where the name is safe as it
    is; otherwise, or where two names differ only in case (one file on macOS), the slug plus a
    hash of the name: ``a/b`` and ``a-b``, or ``..`` and ``team``, must not share a page."""

    def hashed(team: str) -> str:
        return f"team-{slug(team)}-{hashlib.sha256(team.encode()).hexdigest()[:10]}.html"

    names = {t: f"team-{t}.html" if slug(t) == t else hashed(t) for t in teams}
    count = Counter(n.lower() for n in names.values())
    return {t: hashed(t) if count[n.lower()] > 1 else n for t, n in names.items()}


@dataclass(frozen=True, slots=True)
class Written:
    scope: str
    path: Path
    #: Figures of the page for ``report --json`` (the cluster's queue time).
    figures: dict[str, Any] = field(default_factory=dict)


def period_bounds(ledger: LedgerStore, period: Period, end: date | None) -> tuple[date, date]:
    """[start, end) of the period; without ``end``, the period ends with the ledger's newest day."""
    if period not in PERIOD_DAYS:
        raise ConfigError(f"period must be one of {', '.join(PERIOD_DAYS)}, not {period!r}")
    if end is None:
        days = ledger.day_range()
        end = days[1] + timedelta(days=1) if days is not None else date.today() + timedelta(days=1)
    return end - timedelta(days=PERIOD_DAYS[period]), end


def write_reports(
    store: StateStore,
    out: Path,
    *,
    period: Period,
    end: date | None,
    currency: str,
    rate: str,
    consolidation: ConsolidationSettings | None = None,
    policy: PolicySettings | None = None,
    prices: PriceTable | None = None,
) -> list[Written]:
    """``index.html`` for the cluster and ``team-<name>.html`` per team, into ``out``;
    ``consolidation``: the section's settings (None: the section says consolidation is off);
    ``policy``: the roll-out settings the safety figures are read with (None: no such section);
    ``prices``: the on-demand prices spot savings are counted against (None: no such section)."""
    ledger = LedgerStore(store)
    start, stop = period_bounds(ledger, period, end)
    cluster = gather(ledger, start, stop, currency=currency, rate=rate)
    cluster.insights = gather_insights(store, start, stop)
    cluster.consolidation = gather_consolidation(store, consolidation)
    cluster.faults = gather_faults(store, start, stop)
    cluster.queue = gather_queue(store, start, stop)
    cluster.showback = gather_showback(ledger, start, stop)
    cluster.spot = gather_spot(ledger, start, stop, prices) if prices is not None else None
    cluster.interruptions = gather_interruptions(store, start, stop)
    if policy is not None:
        cluster.safety = RolloutBook(store, policy).safety()
    ensure_folder(out)
    links = team_files(cluster.teams)
    # Team pages first, the index last: the index never links to a page that failed to write.
    written = []
    for team, name in links.items():
        data = gather(ledger, start, stop, team=team, currency=currency, rate=rate)
        data.insights = gather_insights(store, start, stop, team=team)
        data.consolidation = gather_consolidation(store, consolidation, team=team)
        data.faults = gather_faults(store, start, stop, team=team)
        data.showback = gather_showback(ledger, start, stop, team=team)
        data.spot = gather_spot(ledger, start, stop, prices, team=team) if prices is not None else None
        write_text(out / name, render(data))
        written.append(Written(team, out / name))
    write_text(out / "index.html", render(cluster, links=links))
    return [Written("cluster", out / "index.html", {"queue": cluster.queue.as_dict()}), *written]
