"""The consolidation page: off, waiting for history, and a live plan with its chart by team."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from gpusteward.analysis.consolidation import Group, Item, Plan
from gpusteward.policy.consolidation import ConsolidationSettings
from gpusteward.runtime.consolidation_step import ConsolidationStep
from gpusteward.web.pages.consolidation import plan_values


class Ctx:
    def __init__(self, step: ConsolidationStep | None, enabled: bool) -> None:
        self.settings = SimpleNamespace(consolidation=ConsolidationSettings(enabled=enabled))
        self.live_steward = SimpleNamespace(consolidation=step)
        self.at = None

    def steward(self) -> Any:
        return self.live_steward

    def now(self) -> Any:
        from gpusteward.integrations.sim import DEFAULT_START

        return DEFAULT_START + timedelta(hours=3)


def request(ctx: Ctx) -> Any:
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(web=ctx)))


def test_off_and_waiting_show_no_plan() -> None:
    assert plan_values(request(Ctx(None, enabled=False)))["plan"] is None
    step = ConsolidationStep(ConsolidationSettings(enabled=True))
    got = plan_values(request(Ctx(step, enabled=True)))
    assert got["plan"] is None
    assert got["chart"] == ""


def test_a_plan_shows_gpus_now_and_after_by_team_as_a_chart() -> None:
    step = ConsolidationStep(ConsolidationSettings(enabled=True))
    step._items = {w: Item(w, team=t) for w, t in (("a", "nlp"), ("b", "nlp"), ("c", "<b>x</b>"))}
    step.last = Plan("time-aware", (Group(("a", "b"), "time-slicing"), Group(("c",), "dedicated")))
    got = plan_values(request(Ctx(step, enabled=True)))
    assert got["plan"]["by_team"] == {"<b>x</b>": {"now": 1, "after": 1}, "nlp": {"now": 2, "after": 1}}
    assert (got["plan"]["gpus_before"], got["plan"]["gpus_after"]) == (3, 2)
    chart = str(got["chart"])
    assert chart.startswith("<svg")
    assert "&lt;b&gt;x&lt;/b&gt;" in chart, "the chart escapes team names"
