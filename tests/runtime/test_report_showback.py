"""The report's Showback section (issue 19): per team on the cluster page and per owner on a
team's page, the period's rows added up (days outside it left out), the stacked cost chart with
one bar segment per team and day, names escaped; on a real SQLite file."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest

from gpusteward.domain.records import DailyAmounts, DailyKey, ShowbackAmounts, ShowbackKey
from gpusteward.report import write_reports
from gpusteward.store.db import StateStore

HOSTILE = "<b>ml</b>"


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    s.create_schema()

    def k(day: str, team: str, user: str) -> ShowbackKey:
        return ShowbackKey(day, team, user, "NVIDIA A100", "reserved", "USD")

    s.ledger.add(
        {DailyKey("2026-03-02", "USD", "ann", "nlp", "idle"): DailyAmounts(waste_cost=1.0)},
        {},
        showback={
            k("2026-03-02", "nlp", "ann"): ShowbackAmounts(10, 6, 1, 0, 20.0, 2.0, 0.4),
            k("2026-03-03", "nlp", "bo"): ShowbackAmounts(5, 1, 3, 2, 10.0),
            k("2026-03-03", HOSTILE, "cy"): ShowbackAmounts(8, 8, 0, 0, 16.0),
            k("2026-02-20", "nlp", "ann"): ShowbackAmounts(100, 0, 0, 0, 999.0),  # before the period
        },
    )
    return s


def test_the_cluster_page_per_team_and_the_team_page_per_owner(store: StateStore, tmp_path: Path) -> None:
    out = tmp_path / "r"
    written = write_reports(store, out, period="week", end=date(2026, 3, 5), currency="USD", rate="reserved")
    index = (out / "index.html").read_text()
    section = index.split('<section id="showback">', 1)[1].split("</section>", 1)[0]
    costs = dict(re.findall(r'<tr data-who="([^"]*)" data-cost="([^"]*)">', section))
    assert costs == {"nlp": "30.40", "&lt;b&gt;ml&lt;/b&gt;": "16.00"}
    assert re.search(r'id="showback-total" data-cost="46.40"', section)
    assert HOSTILE not in index
    # The chart: a stacked bar per day of the week, a segment per team.
    assert section.count('data-chart="stacked"') == 1
    assert len(re.findall(r'<rect class="bar" data-series=', section)) == 7 * 2
    nlp = next(w for w in written if w.scope == "nlp").path.read_text()
    team = nlp.split('<section id="showback">', 1)[1].split("</section>", 1)[0]
    assert dict(re.findall(r'<tr data-who="([^"]*)" data-cost="([^"]*)">', team)) == {
        "ann": "20.40",
        "bo": "10.00",
    }
    assert "<th>owner</th>" in team


def test_no_rows_no_section(tmp_path: Path) -> None:
    s = StateStore(f"sqlite:///{tmp_path / 'e.db'}")
    s.create_schema()
    s.ledger.add({DailyKey("2026-03-02", "USD", "ann", "nlp", "idle"): DailyAmounts(waste_cost=1.0)}, {})
    write_reports(s, tmp_path / "r", period="week", end=date(2026, 3, 5), currency="USD", rate="on-demand")
    assert 'id="showback"' not in (tmp_path / "r" / "index.html").read_text()
