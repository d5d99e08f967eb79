"""The report's GPU faults section (issue 16): GPU-hours lost to failed GPUs, from stored
``gpu-failed`` episodes, clipped to the period, overlaps counted once, per team."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.models import Finding, Owner, RuleAction, Workload, WorkloadKind
from gpusteward.report import write_reports
from gpusteward.report.faults import gather_faults
from gpusteward.store.db import StateStore

DAY = date(2026, 3, 2)
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC)
HOSTILE = "<script>alert(1)</script> Xid 79: GPU has fallen off the bus"


def _at(hours: float) -> datetime:
    return MIDNIGHT + timedelta(hours=hours)


def _f(rule: str, uuid: str, workload: str | None, message: str = "failed") -> Finding:
    return Finding(rule, "health", RuleAction.REPAIR, MIDNIGHT, (uuid,), workload, {}, 0.0, 0.0, 0.0, message)


def _job(wid: str, user: str, team: str, uuid: str) -> Workload:
    return Workload(wid, WorkloadKind.JOB, wid, Owner(user, team), 1, (uuid,), _at(-24))


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    s.create_schema()
    s.remember_workloads(
        [_job("job-1", "ann", "vision", "GPU-A"), _job("job-2", "bob", "nlp", "GPU-A")], _at(-24)
    )
    # Out of the period: three days before.
    s.record_findings([_f("gpu-failed", "GPU-Z", None)], _at(-72))
    s.record_findings([_f("gpu-failed", "GPU-Z", None)], _at(-71))
    # GPU-B, free, failed before midnight and still failed at 03:00: 3 h in the period.
    s.record_findings([_f("gpu-failed", "GPU-B", None)], _at(-2))
    s.record_findings([_f("gpu-failed", "GPU-B", None)], _at(3))
    # GPU-A: failed under job-1 10:00-12:30, and under job-2 (rescheduled there) 12:00-14:00:
    # 4 h, not 4.5. A degrading GPU loses nothing.
    s.record_findings([_f("gpu-failed", "GPU-A", "job-1"), _f("gpu-degrading", "GPU-C", None)], _at(10))
    s.record_findings([_f("gpu-failed", "GPU-A", "job-2", HOSTILE)], _at(12))
    s.close_findings([("job-1", "gpu-failed")], _at(12.5))
    s.record_findings([_f("gpu-failed", "GPU-A", "job-2", HOSTILE)], _at(13))
    s.close_findings([("job-2", "gpu-failed")], _at(14))
    return s


def test_gpu_hours_lost_in_the_period(store: StateStore) -> None:
    cluster = gather_faults(store, DAY, DAY + timedelta(days=1))
    assert cluster.gpu_hours_lost == pytest.approx(7.0)
    assert [(r.gpu_uuid, round(r.gpu_hours, 6), r.workload_id, r.ended_at) for r in cluster.rows] == [
        ("GPU-A", 4.0, "job-2", _at(14)),  # the newest episode's holder
        ("GPU-B", 3.0, "", None),  # still failed
    ]
    assert gather_faults(store, DAY, DAY + timedelta(days=1), team="vision").gpu_hours_lost == pytest.approx(
        2.5
    )
    assert gather_faults(store, DAY, DAY + timedelta(days=1), team="nlp").gpu_hours_lost == pytest.approx(2.0)
    # The day before: GPU-B from 22:00 to midnight only.
    before = gather_faults(store, DAY - timedelta(days=1), DAY)
    assert [(r.gpu_uuid, r.gpu_hours) for r in before.rows] == [("GPU-B", pytest.approx(2.0))]


def test_the_report_shows_the_section_escaped(store: StateStore, tmp_path: Path) -> None:
    (index, *_) = write_reports(
        store, tmp_path / "out", period="day", end=DAY + timedelta(days=1), currency="USD", rate="on-demand"
    )
    page = index.path.read_text()
    assert 'id="fault-gpu-hours" data-value="7.00"' in page
    assert '<tr data-gpu="GPU-A" data-gpu-hours="4.00">' in page
    assert "job-2 (bob, nlp)" in page
    assert "still failed" in page
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; Xid 79" in page
