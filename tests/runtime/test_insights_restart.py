"""Lifetime use behind "request K GPUs" survives a restart: saved as ledger marks, read back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.models import Finding, Gpu, Owner, Sample, Workload, WorkloadKind
from gpusteward.runtime.insights import Insights, Lifetimes
from gpusteward.runtime.insights_settings import InsightsSettings
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import LedgerStore
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
UTILS = {"g0": 90.0, "g1": 85.0, "g2": 1.0, "g3": 0.0}  # asked for 4, used 2
GPUS = {u: Gpu(u, "node-1", i, "H100", 81559, price_per_hour=2.0) for i, u in enumerate(UTILS)}
WIDE = Workload("wide", WorkloadKind.JOB, "wide", Owner("ana", "nlp"), 4, tuple(UTILS), T0)
SETTINGS = InsightsSettings(enabled=True, anomalies=False, every_minutes=1)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s


def minutes(start: int, end: int) -> Iterator[tuple[datetime, WindowStore]]:
    """The source's samples, one a minute from T0, in a 30-minute window; yields each minute from
    ``start`` to ``end`` with the window as the agent sees it then."""
    window = WindowStore(window_s=1800, interval_s=60)
    for m in range(end + 1):
        at = T0 + timedelta(minutes=m)
        window.ingest(
            at, [Sample(u, at, gpu_util_pct=v) for u, v in UTILS.items()], dict.fromkeys(UTILS, "wide")
        )
        if m >= start:
            yield at, window


def right_size(insights: Insights, start: int, end: int) -> list[Finding]:
    out: list[Finding] = []
    for at, window in minutes(start, end):
        out = [f for f in insights.findings(window.view(at), GPUS, [WIDE], at) if f.rule == "right-size-gpus"]
        insights.record(at)  # the leader's part of the tick: it saves the sums
    return out


def test_a_restart_gives_the_same_right_size_advice(store: StateStore) -> None:
    # One agent that ran all along (no store: the sums in memory are the whole life).
    (whole,) = right_size(Insights(SETTINGS), 30, 180)
    assert "requested 4 GPUs but used 2 over 3.0 h" in whole.message
    assert whole.gpu_uuids == ("g2", "g3")

    # The same life, with the agent stopped at minute 98 (last saved at 95) and started again at 104.
    assert right_size(Insights(SETTINGS, lifetimes=Lifetimes(store=store)), 30, 98) == []
    marks = LedgerStore(store).marks()
    assert set(marks) == {"life:wide"}
    (after,) = right_size(Insights(SETTINGS, lifetimes=Lifetimes(store=store)), 104, 180)
    assert after.message == whole.message
    assert after.gpu_uuids == whole.gpu_uuids
    assert after.evidence["observed_hours"]["g2"] == pytest.approx(whole.evidence["observed_hours"]["g2"])

    # Without the saved sums the new agent would start counting again: no advice yet.
    assert right_size(Insights(SETTINGS), 104, 180) == []


def test_the_mark_of_a_workload_that_ended_is_dropped(store: StateStore) -> None:
    lifetimes = Lifetimes(store=store)
    for at, window in minutes(30, 40):
        lifetimes.update(window.view(at), [WIDE], at)
        lifetimes.save_due(at)
    assert "life:wide" in LedgerStore(store).marks()
    again = Lifetimes(store=store, save_every_s=0)
    at = T0 + timedelta(minutes=41)
    again.update(WindowStore(window_s=1800, interval_s=60).view(at), [], at)
    again.save_due(at)
    assert LedgerStore(store).marks() == {}
    assert again.snapshot() == {}
