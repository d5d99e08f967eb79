"""The report's Queue section (issue 16): queue time of the jobs started in the period, from the
stored waits, p50/p95 overall and per queue (hand-computed, linear as numpy), in the page and in
``report --json``; jobs outside the period are out, and team pages have no such section."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.queue import StartedWait
from gpusteward.domain.records import DailyAmounts, DailyKey
from gpusteward.report import write_reports
from gpusteward.report.queue import duration, gather_queue
from gpusteward.store.db import StateStore
from gpusteward.store.memory import MemoryStore

DAY = date(2026, 3, 2)
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC)
HOSTILE = "<b>gpu</b>"
HOSTILE_ESCAPED = "&lt;b&gt;gpu&lt;/b&gt;"
#: (queue, seconds waited, GPUs) of the jobs started on DAY.
JOBS = [
    (HOSTILE, 60.0, 1),
    (HOSTILE, 120.0, 2),
    (HOSTILE, 300.0, 4),
    (HOSTILE, 600.0, 8),
    ("a100", 3600.0, 8),
    ("a100", 7200.0, 8),
]


def _waits() -> list[StartedWait]:
    inside = [
        StartedWait(f"j{i}", q, w, MIDNIGHT + timedelta(hours=i + 1), g, "slurm")
        for i, (q, w, g) in enumerate(JOBS)
    ]
    outside = [
        StartedWait("before", "a100", 99_999.0, MIDNIGHT - timedelta(seconds=1), 8, "slurm"),
        StartedWait("after", "a100", 99_999.0, MIDNIGHT + timedelta(days=1), 8, "slurm"),
    ]
    return inside + outside


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    s.create_schema()
    for tick in range(3):  # three ticks of the look-back see every job again
        s.record_queue_waits(_waits(), MIDNIGHT + timedelta(days=1, minutes=tick))
    # A team in the ledger, so the report writes a team page too.
    s.ledger.add({DailyKey(DAY.isoformat(), "USD", "ann", "nlp", "idle"): DailyAmounts(waste_cost=1.0)}, {})
    return s


def test_queue_time_of_the_jobs_started_in_the_period(store: StateStore) -> None:
    q = gather_queue(store, DAY, DAY + timedelta(days=1))
    # Linear percentiles by hand: overall 60 120 300 600 3600 7200 s, p50 at rank 2.5 is
    # 300 + 0.5 * 300, p95 at rank 4.75 is 3600 + 0.75 * 3600.
    assert (q.total.started, q.total.gpus, q.total.p50_s, q.total.p95_s) == (6, 31, 450.0, 6300.0)
    assert [(r.queue, r.started, r.gpus, r.p50_s, pytest.approx(r.p95_s)) for r in q.rows] == [
        ("a100", 2, 16, 5400.0, 7020.0),  # 3600 + 0.95 * 3600: the longest p95 first
        (HOSTILE, 4, 15, 210.0, 555.0),  # ranks 1.5 and 2.85: 120 + 0.5 * 180, 300 + 0.85 * 300
    ]
    assert np.percentile([w for _, w, _ in JOBS], [50, 95]).tolist() == [450.0, 6300.0]
    # The day before holds only the job that started a second before midnight.
    before = gather_queue(store, DAY - timedelta(days=1), DAY)
    assert (before.total.started, before.total.p50_s) == (1, 99_999.0)
    # A period without a started job has no queue time, not a zero one.
    empty = gather_queue(store, DAY + timedelta(days=5), DAY + timedelta(days=6))
    assert (empty.total.started, empty.total.p50_s, empty.total.p95_s, empty.rows) == (0, None, None, [])


def test_the_memory_store_gives_the_same_section(store: StateStore) -> None:
    mem = MemoryStore()
    mem.record_queue_waits(_waits(), MIDNIGHT + timedelta(days=1))
    end = DAY + timedelta(days=1)
    assert gather_queue(mem, DAY, end) == gather_queue(store, DAY, end)


def test_the_cluster_page_shows_the_section_escaped_and_team_pages_do_not(
    store: StateStore, tmp_path: Path
) -> None:
    index, team = write_reports(
        store, tmp_path / "out", period="day", end=DAY + timedelta(days=1), currency="USD", rate="on-demand"
    )
    page = index.path.read_text()
    assert '<section id="queue">' in page
    assert 'id="queue-started" data-value="6"' in page
    assert 'id="queue-gpus" data-value="31"' in page
    assert 'id="queue-p50" data-value="450.0">7.5 min<' in page
    assert 'id="queue-p95" data-value="6300.0">1.8 h<' in page
    assert f'<tr data-queue="{HOSTILE_ESCAPED}" data-p50="210.0" data-p95="555.0">' in page
    assert '<tr data-queue="a100" data-p50="5400.0" data-p95="7020.0">' in page
    assert HOSTILE not in page
    assert HOSTILE_ESCAPED in page
    assert "Jobs still waiting at the end of the period are not counted" in page
    assert team.scope == "nlp"
    assert 'id="queue"' not in team.path.read_text()


def test_an_empty_period_says_so(tmp_path: Path) -> None:
    s = StateStore(f"sqlite:///{tmp_path / 'e.db'}")
    s.create_schema()
    (index,) = write_reports(s, tmp_path / "out", period="week", end=DAY, currency="USD", rate="on-demand")
    page = index.path.read_text()
    assert 'id="queue-started" data-value="0"' in page
    assert 'id="queue-p50" data-value="">n/a<' in page
    assert "No GPU job started in this period" in page


def test_report_json_carries_the_queue_figures(store: StateStore, tmp_path: Path) -> None:
    store.close()
    args = ["report", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "s.db")]
    result = CliRunner().invoke(app, [*args, "--period", "day", "--end", DAY.isoformat(), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out["files"]) == {"cluster", "nlp"}
    assert {k: out["queue"][k] for k in ("started", "gpus", "p50_s", "p95_s")} == {
        "started": 6,
        "gpus": 31,
        "p50_s": 450.0,
        "p95_s": 6300.0,
    }
    assert out["queue"]["by_queue"]["a100"] == {
        "started": 2,
        "gpus": 16,
        "p50_s": 5400.0,
        "p95_s": pytest.approx(7020.0),
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "n/a"), (42.0, "42 s"), (450.0, "7.5 min"), (6300.0, "1.8 h"), (2 * 86_400.0, "2.0 d")],
)
def test_durations_read_for_people(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text
