"""Notice throttling: one per step, N per owner per day, the rest in the next day's digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.models import Level, Notice, Owner
from gpusteward.notify import MemoryNotifier
from gpusteward.notify.throttle import ThrottledNotifier
from gpusteward.policy.settings import NoticeSettings
from gpusteward.store.db import StateStore

T0 = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
ALICE, BOB = Owner("alice", "nlp"), Owner("bob", "cv")


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s


def notice(n: int, owner: Owner | None = ALICE, at: datetime = T0, key: str | None = None) -> Notice:
    return Notice(at, f"job-{n}", owner, f"Notice {n}", "body", Level.NOTIFY, key or f"job-{n}:1:1:warn-1")


def deliver(t: ThrottledNotifier, store: StateStore, n: Notice) -> bool:
    sent = t.deliver(n)
    store.record_notice(n, sent=sent)  # as the action runner does
    return sent


def test_at_most_n_per_owner_per_day_the_rest_in_a_digest(store: StateStore) -> None:
    inner = MemoryNotifier()
    t = ThrottledNotifier(inner, store, NoticeSettings(max_per_owner_per_day=3))
    sent = [deliver(t, store, notice(i, at=T0 + timedelta(minutes=i))) for i in range(5)]
    assert sent == [True, True, True, False, False]
    assert deliver(t, store, notice(9, owner=BOB))  # another owner has their own allowance
    assert deliver(t, store, notice(10, owner=None))  # admins are never held back
    assert [n.workload_id for n in inner.sent] == ["job-0", "job-1", "job-2", "job-9", "job-10"]
    # What was held back is recorded, not sent.
    held = [r.notice.workload_id for r in store.notices(limit=100) if not r.sent]
    assert held == ["job-3", "job-4"]

    t.flush(T0 + timedelta(hours=10))  # same day: nothing yet
    assert len(inner.sent) == 5
    t.flush(T0 + timedelta(days=1))  # the next day: one digest per owner with held notices
    digest = inner.sent[-1]
    assert digest.owner == ALICE
    assert "2 more notice(s) from 2026-03-04" in digest.subject
    assert "Notice 3" in digest.body
    assert "Notice 4" in digest.body
    assert len(inner.sent) == 6
    # A new day, a new allowance.
    assert deliver(t, store, notice(20, at=T0 + timedelta(days=1, hours=1)))


def test_one_notice_per_step_and_counts_survive_a_restart(store: StateStore) -> None:
    inner = MemoryNotifier()
    t = ThrottledNotifier(inner, store, NoticeSettings(max_per_owner_per_day=2))
    assert deliver(t, store, notice(1))
    assert not deliver(t, store, notice(1))  # the same step again (a retry after a crash): once only
    again = ThrottledNotifier(MemoryNotifier(), store, NoticeSettings(max_per_owner_per_day=2))
    assert not again.deliver(notice(1))  # still known after a restart
    assert again.deliver(notice(2))
    assert not again.deliver(notice(3))  # the day's two were already used up before the restart
