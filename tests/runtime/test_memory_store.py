"""The loop on the in-memory store reaches the same actions, decisions and notices as on SQLite."""

from __future__ import annotations

from pathlib import Path

from gpusteward.domain.models import ActionStatus, Level
from gpusteward.domain.store_ports import TickStore
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.store.memory import MemoryStore

from .conftest import small_settings


def _run(tmp_path: Path, store: TickStore | None) -> tuple[TickStore, list[tuple[str, str]]]:
    clock = SimClock(DEFAULT_START)
    notifier = MemoryNotifier()
    settings = small_settings(tmp_path / "state.db")
    steward, _ = build_steward(settings, clock=clock, notifier=notifier, store=store)
    for _ in range(4 * 60):
        steward.tick()
        clock.advance(60)
    return steward.store, [(n.workload_id, n.subject) for n in notifier.sent]


def test_the_small_cluster_acts_the_same_on_memory_and_sqlite(tmp_path: Path) -> None:
    sql, sql_sent = _run(tmp_path, None)
    memory, memory_sent = _run(tmp_path / "unused", MemoryStore())

    def acted(store: TickStore) -> list[tuple[str, str, ActionStatus, int, object]]:
        return [
            (a.idempotency_key, a.step, a.status, a.attempts, a.updated_at)
            for a in store.actions(limit=10_000)
        ]

    assert acted(memory) == acted(sql)
    stops = [a for a in memory.actions(limit=10_000) if a.level >= Level.GRACEFUL_STOP]
    assert stops  # the run is long enough to stop something
    assert memory_sent == sql_sent
    wids = {a.workload_id for a in sql.actions(limit=10_000)}
    for w in sorted(wids):
        assert memory.decisions_for(w, 1000) == sql.decisions_for(w, 1000)
        assert [e.to_dict() for e in memory.findings_for(w)] == [e.to_dict() for e in sql.findings_for(w)]
    assert [r.event for r in memory.audit_log(10_000)] == [r.event for r in sql.audit_log(10_000)]
