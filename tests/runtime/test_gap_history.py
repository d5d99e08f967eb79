"""The idle-gap record in the runtime: fed from the window each tick, counts saved by the
leader as ledger marks and read back after a restart; a follower counts but never writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from gpusteward.analysis.rules import RulePack, RuleSpec, compile_rules
from gpusteward.domain.models import Owner, Sample, Workload, WorkloadKind
from gpusteward.runtime.gap_history import GapHistory, build_gap_history
from gpusteward.store.db import StateStore
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 3, 4, 0, 0, tzinfo=UTC)
H6 = 6 * 3600.0
POD = Workload(
    "pod/s", WorkloadKind.POD, "s", Owner("ana"), 1, ("g0",), T0, labels={"gpusteward.io/class": "service"}
)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s


def busy_at(m: int) -> bool:
    """A burst of 10 minutes every 16 hours: each quiet spell lasts 950 minutes."""
    return m % 960 >= 950


def run(history: GapHistory, start: int, end: int, *, leader: bool = True) -> None:
    window = WindowStore(window_s=3600, interval_s=60)
    for m in range(max(0, start - 60), end):
        at = T0 + timedelta(minutes=m)
        window.ingest(at, [Sample("g0", at, gpu_util_pct=40.0 if busy_at(m) else 0.0)], {"g0": "pod/s"})
        if m >= start:
            history.update(window.view(at), [POD], at)
            if leader:
                history.save_due(at, [POD.id])


def test_the_record_follows_the_window_and_survives_a_restart(store: StateStore) -> None:
    whole = GapHistory([H6])
    run(whole, 0, 5 * 960)
    book = whole.books[H6]
    assert book.reached[0, 3] == 5  # five spells reached 1 h; none was busy again within 6 h
    assert book.busy[0, 3] == 0

    first = GapHistory([H6], store)
    run(first, 0, 3 * 960)  # saved every 5 minutes, the last time at minute 2875
    again = GapHistory([H6], store)
    run(again, 3 * 960, 5 * 960 + 70)
    assert again.books[H6].reached[0, 3] == 5  # 3 before the restart, 2 after
    odds = again.odds(H6, [POD.id], np.array([0]), T0 + timedelta(minutes=5 * 960 + 69))
    assert odds is not None
    assert (odds.gaps[0], odds.p[0], odds.idle_s[0]) == (5, 0.0, 69 * 60.0)
    assert odds.upper[0] == pytest.approx(0.351, abs=1e-3)  # Wilson, 0 of 5: 2.706 / 7.706


def test_a_follower_never_writes(store: StateStore) -> None:
    run(GapHistory([H6], store), 0, 960, leader=False)
    assert not [k for k in store.ledger.marks() if k.startswith("gaps:")]


def test_built_only_for_the_horizons_rules_read() -> None:
    def pack(when: str) -> RulePack:
        return RulePack(rules=[RuleSpec(name="r", kind="idle", when=when)])

    assert build_gap_history(compile_rules(pack("zero_for(gpu_util_pct) >= 60")), None) is None
    h = build_gap_history(
        compile_rules(pack("p_busy_again_upper(6h) < 0.05 or p_busy_again(2h) < 0.01")), None
    )
    assert h is not None
    assert sorted(h.books) == [7200.0, H6]
