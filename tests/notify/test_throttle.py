"""Notice throttling: one per step, N per owner per day, the rest in the next day's digest."""

from __future__ import annotations

from dataclasses import replace
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


def test_a_pending_digest_survives_a_restart_and_goes_out_once(store: StateStore) -> None:
    settings = NoticeSettings(max_per_owner_per_day=1)
    t = ThrottledNotifier(MemoryNotifier(), store, settings)
    sent = [deliver(t, store, notice(i, at=T0 + timedelta(minutes=i))) for i in range(4)]
    assert sent == [True, False, False, False]
    # A dry-run notice and a repeat of a sent step are unsent rows too, but were never held.
    store.record_notice(replace(notice(7), subject="[dry-run] Notice 7"), sent=False)
    assert not deliver(t, store, notice(0, at=T0 + timedelta(minutes=9)))

    # The agent stops before the day is over; a new one starts on the same database.
    inner = MemoryNotifier()
    again = ThrottledNotifier(inner, store, settings)
    again.flush(T0 + timedelta(hours=5))  # same day: the digest is not due yet
    assert inner.sent == []
    again.flush(T0 + timedelta(days=1))
    assert len(inner.sent) == 1
    digest = inner.sent[0]
    assert digest.owner == ALICE
    assert digest.subject == "gpusteward digest: 3 more notice(s) from 2026-03-04"
    assert [f"Notice {i}" in digest.body for i in range(4)] == [False, True, True, True]
    assert "Notice 7" not in digest.body
    again.flush(T0 + timedelta(days=2))
    assert len(inner.sent) == 1

    # A restart after the digest went out does not send it again, nor does the day after.
    later = MemoryNotifier()
    third = ThrottledNotifier(later, store, settings)
    third.flush(T0 + timedelta(days=1, hours=1))
    third.flush(T0 + timedelta(days=2))
    assert later.sent == []
    digests = [r for r in store.notices(limit=100) if (r.notice.dedup_key or "").startswith("digest:")]
    assert [(r.notice.dedup_key, r.sent) for r in digests] == [("digest:alice:2026-03-04", True)]


def test_a_restart_days_later_sends_the_missed_digest(store: StateStore) -> None:
    settings = NoticeSettings(max_per_owner_per_day=1)
    t = ThrottledNotifier(MemoryNotifier(), store, settings)
    assert [deliver(t, store, notice(i, owner=BOB)) for i in range(2)] == [True, False]
    inner = MemoryNotifier()
    ThrottledNotifier(inner, store, settings).flush(T0 + timedelta(days=3))
    assert [n.subject for n in inner.sent] == ["gpusteward digest: 1 more notice(s) from 2026-03-04"]
    assert inner.sent[0].owner == BOB
