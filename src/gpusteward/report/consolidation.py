"""The report's consolidation section: the plan the leader stored last (runtime/consolidation_doc.py),
GPUs now vs after by team as a chart, or why there is none. A team's page shows its own row and
groups. The chart is shared with the web page (web/pages/consolidation.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpusteward.domain.store_ports import Docs
from gpusteward.policy.consolidation import ConsolidationSettings
from gpusteward.report.charts import bar_chart
from gpusteward.runtime.consolidation_doc import PLAN_KEY, StoredPlan, read_plan


def team_chart(by_team: dict[str, dict[str, int]], before: int, after: int) -> str:
    """GPUs now and after the plan, by team (the web page and the weekly report)."""
    teams = list(by_team)
    return bar_chart(
        teams,
        {"now": [by_team[t]["now"] for t in teams], "after": [by_team[t]["after"] for t in teams]},
        title=f"GPUs now vs after consolidation, by team ({before} → {after})",
        unit="GPUs",
    )


@dataclass(frozen=True, slots=True)
class ConsolidationSection:
    #: "off" (``consolidation.enabled`` is false), "waiting" (on, no plan stored yet) or "plan".
    status: str
    plan: StoredPlan | None = None
    #: On: the hours of usage the leader gathers before its first plan.
    min_history_hours: float = 0.0

    def chart(self) -> str:
        """The SVG chart, "" without a plan; its text is escaped by ``bar_chart``."""
        if self.plan is None:
            return ""
        p = self.plan
        rows = {t: {"now": now, "after": after} for t, (now, after) in p.by_team.items()}
        return team_chart(rows, sum(r["now"] for r in rows.values()), sum(r["after"] for r in rows.values()))


def gather_consolidation(
    store: Docs, settings: ConsolidationSettings | None, *, team: str | None = None
) -> ConsolidationSection:
    """The section for the cluster (``team`` None) or one team's page."""
    if settings is None or not settings.enabled:
        return ConsolidationSection("off")
    plan = read_plan(store.load_doc(PLAN_KEY))
    if plan is None:
        return ConsolidationSection("waiting", min_history_hours=settings.min_history_hours)
    if team is not None:
        mine = {t: v for t, v in plan.by_team.items() if t == team}
        plan = replace(
            plan,
            groups=tuple(g for g in plan.groups if g.team == team),
            by_team=mine,
            groups_total=sum(1 for g in plan.groups if g.team == team),
        )
    return ConsolidationSection("plan", plan, settings.min_history_hours)
