"""Anomalies and advice in the real loop: a replayed trace with a planted leak and a small model on
a big GPU goes through window → insights → policy → notices, and never beyond a notice."""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from gpusteward.domain.models import Level
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings

pytest.importorskip("sklearn")

T0 = datetime(2025, 6, 2, 8, 0, tzinfo=UTC)
INSIGHT_RULES = {"anomaly", "gpu-too-large", "input-bound", "right-size-gpus"}


def write_trace(path: Path, minutes: int = 150) -> None:
    """16 one-GPU training jobs; ``leaky`` grows its memory 3 GiB an hour, ``tiny`` runs a small
    model (12 %, 4 GiB) on an 80 GB H100."""
    rng = np.random.default_rng(1)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "gpu", "util_pct", "mem_used_mib", "mem_total_mib", "power_w", "workload",
                    "owner", "team", "gpu_model"])  # fmt: skip
        for m in range(minutes):
            at = (T0 + timedelta(minutes=m)).isoformat()
            for k in range(16):
                name = {3: "leaky", 9: "tiny"}.get(k, f"train-{k}")
                util, mem = rng.normal(88, 3), 60_000 + rng.normal(0, 30)
                if name == "leaky":
                    mem = 10_000 + 50.0 * m
                if name == "tiny":
                    util, mem = rng.normal(12, 1), 4096 + rng.normal(0, 10)
                power = 100 + 3 * util + rng.normal(0, 4)
                w.writerow([at, f"GPU-{k}", f"{util:.1f}", f"{mem:.0f}", 81559, f"{power:.0f}", name, "ana",
                            "vision", "H100"])  # fmt: skip


def steward_for(tmp_path: Path, **insights: object):
    trace = tmp_path / "trace.csv"
    write_trace(trace)
    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        source={"name": "replay", "replay": {"trace": str(trace), "align": "trace"}},
        store={"url": f"sqlite:///{tmp_path / 's.db'}"},
        insights={"enabled": True, "every_minutes": 15, "contamination": 0.1, **insights},
    )
    clock = SimClock(T0 + timedelta(minutes=61))
    notifier = MemoryNotifier()
    steward, _ = build_steward(settings, clock=clock, notifier=notifier)
    return steward, clock, notifier


def test_leak_and_oversized_gpu_reach_owners_as_one_notice_and_nothing_more(tmp_path: Path) -> None:
    steward, clock, notifier = steward_for(tmp_path)
    assert steward.insights is not None
    reports = []
    for _ in range(80):
        reports.append(steward.tick())
        clock.advance(60)
    found = {(f.rule, f.workload_id) for r in reports for f in r.findings if f.rule in INSIGHT_RULES}
    assert ("anomaly", "leaky") in found
    assert ("gpu-too-large", "tiny") in found
    assert {wid for _, wid in found} <= {"leaky", "tiny"}  # the 14 healthy jobs get nothing
    leak = next(f for r in reports for f in r.findings if f.rule == "anomaly")
    assert "mem_slope_mib_per_h" in leak.evidence
    assert "GPU memory growth" in leak.message
    # Advice only: every decision on them stays at a notice, and each owner hears once.
    decisions = [d for r in reports for d in r.decisions if d.workload_id in {"leaky", "tiny"}]
    assert decisions
    assert max(d.level for d in decisions) == Level.NOTIFY
    stops = [a for r in reports for a in r.actions if a.decision.level >= Level.GRACEFUL_STOP]
    assert stops == []
    sent = [n for n in notifier.sent if n.workload_id in {"leaky", "tiny"}]
    assert sorted(n.workload_id for n in sent) == ["leaky", "tiny"]
    assert all(n.subject.startswith("Advice") for n in sent)
    assert "1g.10gb" in next(n.body for n in sent if n.workload_id == "tiny")
    # The findings are episodes in the store: what the reports read.
    episodes = {(e.finding.rule, e.finding.workload_id) for e in steward.store.all_findings()}
    assert {("anomaly", "leaky"), ("gpu-too-large", "tiny")} <= episodes


def test_the_tick_goes_on_without_scikit_learn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    steward, _clock, _ = steward_for(tmp_path)
    report = steward.tick()
    assert steward.insights is not None
    assert any("pip install 'gpusteward[forecast]'" in n for n in steward.insights.notes)
    assert {f.rule for f in report.findings if f.rule in INSIGHT_RULES} == {"gpu-too-large"}


def test_insights_can_be_turned_off(tmp_path: Path) -> None:
    steward, _, _ = steward_for(tmp_path, enabled=False)
    assert steward.insights is None
    assert not any(f.rule in INSIGHT_RULES for f in steward.tick().findings)


def test_the_report_lists_the_advice_per_owner(tmp_path: Path) -> None:
    from gpusteward.report import write_reports

    steward, clock, _ = steward_for(tmp_path)
    for _ in range(40):
        steward.tick()
        clock.advance(60)
    assert steward.ledger is not None
    steward.ledger.flush(clock.now())
    written = write_reports(
        steward.store, tmp_path / "html", period="day", end=None, currency="USD", rate="on-demand"
    )
    page = written[0].path.read_text()
    table = page[page.index('<table id="insights">') :]
    table = table[: table.index("</table>")]
    assert 'data-rule="anomaly"' in table
    assert "leaky" in table
    assert "GPU memory growth" in table
    assert 'data-rule="gpu-too-large"' in table
    assert "1g.10gb" in table
    assert "train-1" not in table
    # Anomalies and oversized GPUs are not idle GPUs: the GPU-count advice does not name them.
    advice = page[page.index("<h2>Advice</h2>") : page.index('<table id="insights">')]
    assert "tiny" not in advice
    assert "leaky" not in advice
