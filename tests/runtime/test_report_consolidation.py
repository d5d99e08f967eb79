"""The consolidation plan in the weekly report: the leader stores it when it changes; the report
shows it with its chart (GPUs now vs after, by team) and its figures, or says why there is none."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.runtime.test_report import Page

from gpusteward.analysis.consolidation import Group, Item, Plan
from gpusteward.analysis.cost import PriceTable
from gpusteward.policy.consolidation import ConsolidationSettings, Move
from gpusteward.report import ReportData, render, write_reports
from gpusteward.report.consolidation import gather_consolidation
from gpusteward.runtime.consolidation_doc import MAX_TEAMS, OTHER_TEAMS, PLAN_KEY, plan_document, read_plan
from gpusteward.runtime.consolidation_step import ConsolidationStep
from gpusteward.store.db import StateStore
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
EVIL = '<img src=x onerror="alert(1)">'
ON = ConsolidationSettings(enabled=True, min_history_hours=6)


class CountingDocs:
    """The Docs port in memory, counting writes."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.writes = 0

    def load_doc(self, key: str) -> Any:
        return self.store.load_doc(key)

    def save_doc(self, key: str, value: Any, *, at: datetime, **kw: Any) -> None:
        self.writes += 1
        self.store.save_doc(key, value, at=at, **kw)


def planned_step() -> ConsolidationStep:
    step = ConsolidationStep(ON)
    step._items = {
        "a": Item("a", team=EVIL),
        "b": Item("b", team=EVIL),
        "c": Item("c", team="vision"),
        "d": Item("d", team="vision"),
        "e": Item("e", team="vision"),
    }
    step.last = Plan(
        "time-aware",
        (
            Group(("a", "b"), "time-slicing", contention_share=0.02, peak_memory_mib=20480.0),
            Group(("c", "d"), "time-slicing", contention_share=0.004, peak_memory_mib=10240.0),
            Group(("e",), "dedicated"),
        ),
    )
    step._planned_at = T0
    return step


def test_the_plan_is_written_when_it_changes_and_not_otherwise() -> None:
    step, docs, prices = planned_step(), CountingDocs(), PriceTable(default_per_hour=3.0)
    step.record(T0, docs, prices)
    step.record(T0 + timedelta(minutes=1), docs, prices)
    assert docs.writes == 1, "nothing new: not written again"
    step._planned_at = T0 + timedelta(hours=1)  # re-planned, the same plan
    step.record(T0 + timedelta(hours=1), docs, prices)
    assert docs.writes == 1
    stored = read_plan(docs.load_doc(PLAN_KEY))
    assert stored is not None
    assert stored.planned_at == T0, "a re-plan that comes out the same is not written"
    step._moves["a"] = Move("a", ON.resource, T0)  # a move made: the document changes
    step.record(T0 + timedelta(hours=1, minutes=1), docs, prices)
    assert docs.writes == 2
    stored = read_plan(docs.load_doc(PLAN_KEY))
    assert stored is not None
    assert stored.moved == ("a",)
    assert (stored.gpus_before, stored.gpus_after, stored.money_per_month) == (5, 3, 2 * 3.0 * 730)


def test_no_plan_no_document() -> None:
    docs = CountingDocs()
    ConsolidationStep(ON).record(T0, docs, PriceTable())
    assert docs.writes == 0
    assert docs.load_doc(PLAN_KEY) is None


def test_the_document_stays_bounded() -> None:
    teams = [f"team-{i:03d}" for i in range(3 * MAX_TEAMS)]
    items = {f"w{i}": Item(f"w{i}", team=t) for i, t in enumerate(teams)}
    plan = Plan("time-aware", tuple(Group((w,), "dedicated") for w in items))
    doc = plan_document(plan, items, [], PriceTable(), resource="r", planned_at=T0)
    assert len(doc["by_team"]) == MAX_TEAMS
    assert doc["by_team"][OTHER_TEAMS]["now"] == 3 * MAX_TEAMS - (MAX_TEAMS - 1)
    assert sum(v["now"] for v in doc["by_team"].values()) == doc["gpus_before"], "totals count everything"


def reports(tmp_path: Path, settings: ConsolidationSettings | None, *, plan: bool) -> Page:
    tmp_path.mkdir(exist_ok=True)
    state = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    state.create_schema()
    if plan:
        planned_step().record(T0, state, PriceTable(default_per_hour=3.0, currency="EUR"))
    (index, *_) = write_reports(
        state,
        tmp_path / "out",
        period="week",
        end=None,
        currency="USD",
        rate="on-demand",
        consolidation=settings,
    )
    state.close()
    return Page(index.path.read_text())


def test_a_stored_plan_shows_its_chart_and_figures_with_team_names_escaped(tmp_path: Path) -> None:
    page = reports(tmp_path, ON, plan=True)
    html = "".join(page.text)
    assert page.by_id("consolidation")["data-status"] == "plan"
    gpus = page.by_id("consolidation-gpus")
    assert (gpus["data-before"], gpus["data-after"]) == ("5", "3")
    assert page.value("consolidation-money") == 2 * 3.0 * 730
    assert page.value("consolidation-contention") == 0.02
    (chart,) = [s for s in page.svgs if s and s[0].get("data-series") in ("now", "after")]
    bars = {(b["data-label"], b["data-series"]): float(b["data-value"]) for b in chart}
    assert bars == {(EVIL, "now"): 2, (EVIL, "after"): 1, ("vision", "now"): 3, ("vision", "after"): 2}
    assert "GPUs now vs after consolidation, by team (5 → 3)" in html
    assert "a, b" in html
    assert "c, d" in html
    raw = (tmp_path / "out" / "index.html").read_text()
    assert EVIL not in raw, "the team name is escaped, in the table and in the chart"
    assert "&lt;img src=x" in raw


def test_a_teams_page_shows_its_own_row_and_groups(tmp_path: Path) -> None:
    state = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    state.create_schema()
    planned_step().record(T0, state, PriceTable())
    data = ReportData("vision", date(2026, 3, 1), date(2026, 3, 2), "USD", "on-demand")
    data.consolidation = gather_consolidation(state, ON, team="vision")
    page = Page(render(data))
    (chart,) = [s for s in page.svgs if s and s[0].get("data-series") in ("now", "after")]
    assert {(b["data-label"], b["data-series"]): float(b["data-value"]) for b in chart} == {
        ("vision", "now"): 3,
        ("vision", "after"): 2,
    }
    assert [a["data-team"] for t, a in page.tags if t == "tr" and "data-team" in a] == ["vision"]


def test_without_a_plan_the_section_says_why(tmp_path: Path) -> None:
    waiting = reports(tmp_path / "on", ON, plan=False)
    assert waiting.by_id("consolidation")["data-status"] == "waiting"
    assert "No plan yet" in "".join(waiting.text)
    assert "6 hours of usage" in "".join(waiting.text)
    off = reports(tmp_path / "off", None, plan=True)  # a plan stored earlier, consolidation now off
    assert off.by_id("consolidation")["data-status"] == "off"
    assert "Consolidation is off" in "".join(off.text)
    assert not [s for s in off.svgs if s and s[0].get("data-series") in ("now", "after")]
