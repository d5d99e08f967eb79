"""The HTML waste report: rendered from a backtest's ledger, its charts exist and its numbers are
the ledger's, for the cluster and for each team."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.replay import load_trace
from gpusteward.policy import rollout as ro
from gpusteward.policy.settings import PolicySettings
from gpusteward.report import ReportData, Written, gather, period_bounds, render, write_reports
from gpusteward.report.figures import Advice
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.scenarios.backtest import run_backtest
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import DailyAmounts, DailyKey, LedgerStore

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "scenario_6h.csv"


class Page(HTMLParser):
    """Start tags with their attributes, and the SVG bars, of one page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.svgs: list[list[dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "svg":
            self.svgs.append([])
        if tag == "rect" and a.get("class") == "bar":
            self.svgs[-1].append(a)

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def by_id(self, id_: str) -> dict[str, str]:
        return next(a for _, a in self.tags if a.get("id") == id_)

    def value(self, id_: str) -> float:
        return float(self.by_id(id_)["data-value"])


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> StateStore:
    url = f"sqlite:///{tmp_path_factory.mktemp('report') / 'state.db'}"
    settings = load_settings(None, policy={"budget": {"max_gpu_share_per_hour": 1.0}})
    run_backtest(load_trace(SCENARIO), settings, state_url=url)
    return StateStore(url)


@pytest.fixture(scope="module")
def pages(state: StateStore, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Page]:
    out = tmp_path_factory.mktemp("html")
    written = write_reports(state, out, period="week", end=None, currency="USD", rate="on-demand")
    assert [w.path.name for w in written] == ["index.html", "team-nlp.html", "team-vision.html"]
    return {w.scope: Page(w.path.read_text()) for w in written}


def ledger_totals(state: StateStore, team: str | None = None) -> dict[str, float]:
    rows = LedgerStore(state).daily(date(2025, 2, 26), date(2025, 3, 5), team=team)
    names = ("waste_gpu_hours", "waste_cost", "saved_gpu_hours", "saved_cost", "stops")
    return {n: sum(getattr(r.amounts, n) for r in rows) for n in names}


@pytest.mark.parametrize("scope", ["cluster", "nlp", "vision"])
def test_totals_are_the_ledgers(pages: dict[str, Page], state: StateStore, scope: str) -> None:
    page = pages[scope]
    t = ledger_totals(state, None if scope == "cluster" else scope)
    assert page.value("waste-cost") == pytest.approx(t["waste_cost"], abs=0.005)
    assert page.value("waste-gpu-hours") == pytest.approx(t["waste_gpu_hours"], abs=0.005)
    assert page.value("saved-cost") == pytest.approx(t["saved_cost"], abs=0.005)
    assert page.value("saved-gpu-hours") == pytest.approx(t["saved_gpu_hours"], abs=0.005)
    assert page.value("stops") == t["stops"]
    assert t["waste_cost"] > 0


def test_teams_add_up_to_the_cluster(pages: dict[str, Page]) -> None:
    for key in ("waste-cost", "saved-cost", "stops"):
        assert pages["nlp"].value(key) + pages["vision"].value(key) == pytest.approx(
            pages["cluster"].value(key), abs=0.01
        )
    links = [a["href"] for t, a in pages["cluster"].tags if t == "a"]
    assert links == ["team-nlp.html", "team-vision.html"]


def test_charts_exist_and_draw_the_ledgers_numbers(pages: dict[str, Page], state: StateStore) -> None:
    page = pages["cluster"]
    assert len(page.svgs) == 5  # per day, top wasters, by kind, efficiency, the showback's cost per day
    daily, wasters, kinds, efficiency, showback = page.svgs
    held = LedgerStore(state).showback(date(2025, 2, 26), date(2025, 3, 5))
    drawn_cost = sum(float(b["data-value"]) for b in showback)
    assert drawn_cost == pytest.approx(sum(r.amounts.spend + r.amounts.power_cost for r in held), abs=0.01)
    per_day: dict[str, float] = defaultdict(float)
    for r in LedgerStore(state).daily(date(2025, 2, 26), date(2025, 3, 5)):
        per_day[r.key.day[5:]] += r.amounts.waste_cost
    drawn = {b["data-label"]: float(b["data-value"]) for b in daily if b["data-series"] == "waste"}
    assert len(drawn) == 7  # a week of days, the last one the ledger's newest
    assert drawn == {d: pytest.approx(per_day[d], abs=1e-3) for d in drawn}
    per_owner: dict[str, float] = defaultdict(float)
    for r in LedgerStore(state).daily(date(2025, 2, 26), date(2025, 3, 5)):
        per_owner[f"{r.key.user} ({r.key.team})"] += r.amounts.waste_cost
    assert {b["data-label"]: float(b["data-value"]) for b in wasters} == {
        k: pytest.approx(v, abs=1e-3) for k, v in per_owner.items() if v > 0
    }
    table = [(a["data-user"], float(a["data-cost"])) for t, a in page.tags if t == "tr" and "data-user" in a]
    assert [u for u, _ in table] == [
        label.split(" ")[0]
        for label in sorted(per_owner, key=lambda k: -per_owner[k])
        if per_owner[label] > 0
    ]
    assert {b["data-label"] for b in kinds} == {"idle", "zombie", "overprovisioned"}
    assert len(efficiency) == 10  # ten buckets of busy share
    assert sum(float(b["data-value"]) for b in efficiency) > 0


def test_actions_and_advice(pages: dict[str, Page]) -> None:
    page = pages["cluster"]
    levels = {a["data-level"]: None for t, a in page.tags if t == "td" and "data-level" in a}
    assert list(levels) == ["L1", "L2", "L3", "L4"]
    text = " ".join(page.text)
    assert "pause-1" in text  # the stops are listed
    advice = [a for t, a in page.tags if t == "li" and "data-suggest" in a]
    assert [(a["data-user"], a["data-suggest"]) for a in advice] == [("dave", "2")]
    assert "your job used 2 of 4 requested GPUs on average: request 2" in text
    assert "request 2" not in " ".join(pages["nlp"].text)  # dave is in vision


def test_advice_wording() -> None:
    assert Advice("a", "t", ("j1", "j2"), used=2.5, requested=8).text == (
        "your 2 jobs used 2.5 of 8 requested GPUs on average: request 3"
    )
    assert Advice("a", "t", ("j1",), used=0, requested=4).suggest == 1


def test_names_are_escaped_and_an_empty_ledger_renders(tmp_path: Path) -> None:
    state = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    state.create_schema()
    ledger = LedgerStore(state)
    evil = '<img src=x onerror="alert(1)">'
    ledger.add({DailyKey("2025-03-04", "USD", evil, evil, "idle"): DailyAmounts(1.0, 3.0)}, {})
    data = gather(ledger, date(2025, 3, 4), date(2025, 3, 5), currency="USD", rate="on-demand")
    html = render(data)
    assert evil not in html
    assert "&lt;img src=x" in html
    empty = render(ReportData("cluster", date(2025, 3, 4), date(2025, 3, 5), "USD", "on-demand"))
    assert "No waste recorded" in empty
    assert empty.count("no data") == 4


def test_period_bounds(state: StateStore) -> None:
    ledger = LedgerStore(state)
    assert period_bounds(ledger, "week", None) == (date(2025, 2, 26), date(2025, 3, 5))  # to its newest day
    assert period_bounds(ledger, "day", date(2025, 3, 5)) == (date(2025, 3, 4), date(2025, 3, 5))
    assert period_bounds(ledger, "month", date(2025, 3, 5))[0] == date(2025, 3, 5) - timedelta(days=30)
    with pytest.raises(ConfigError, match="period must be one of"):
        period_bounds(ledger, "year", None)  # type: ignore[arg-type]


def test_the_safety_figures_are_in_the_cluster_report(tmp_path: Path) -> None:
    state = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    state.create_schema()
    LedgerStore(state).add({DailyKey("2025-03-04", "USD", "bob", "nlp", "idle"): DailyAmounts(1.0, 3.0)}, {})
    policy = PolicySettings()

    def report(out: Path) -> list[Written]:
        return write_reports(
            state, out, period="week", end=None, currency="USD", rate="on-demand", policy=policy
        )

    out = tmp_path / "none"
    report(out)
    assert "No stop attempted yet" in (out / "index.html").read_text()
    # 4 stops attempted, 3 freed their GPUs; one of the stops was resubmitted by its owner.
    book = RolloutBook(state, policy)
    watch = ro.Watch(reclaim={"SlurmExecutor": [4, 3]})
    at = datetime(2025, 3, 4, 12, tzinfo=UTC)
    stop = ro.StopRecord("slurm:gst:1", at, "slurm:a|bob|research", "default", "idle", "batch", "bob")
    watch.stops.append(stop)
    watch.suspect(stop, "resubmitted", at)
    book.save_watch(watch, at)
    out = tmp_path / "some"
    written = write_reports(
        state, out, period="week", end=None, currency="USD", rate="on-demand", policy=policy
    )
    html = (out / "index.html").read_text()
    assert re.search(r'id="safety-false-kills" data-value="([0-9.]+)"', html)[1] == "0.2500"  # type: ignore[index]
    assert re.search(r'id="safety-reclaim" data-value="([0-9.]+)"', html)[1] == "0.7500"  # type: ignore[index]
    for w in written[1:]:  # team pages carry no cluster-wide safety figures
        assert 'id="safety"' not in w.path.read_text()
