"""Workload snapshots: a source that hands back the same workload object each tick (the replay)
gets its snapshot reused, and only last_seen_at moves, once SEEN_EVERY has passed; a changed
workload is written again, last_seen_at with it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import Owner, Workload, WorkloadKind
from gpusteward.store.db import SEEN_EVERY, StateStore

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _job(wid: str, name: str) -> Workload:
    return Workload(wid, WorkloadKind.JOB, name, Owner("ada", "ml"), 1, ("GPU-a",), T0, labels={"k": "v"})


def test_the_same_object_bumps_last_seen_and_a_changed_one_is_rewritten(store: StateStore) -> None:
    job, other = _job("j1", "train"), _job("j2", "eval")
    minute = timedelta(minutes=1)
    store.remember_workloads([job, other], T0)
    store.remember_workloads([job, other], T0 + minute)  # the very same objects, soon after
    rec = store.workload_info("j1")
    assert rec is not None
    assert (rec.name, rec.first_seen_at, rec.last_seen_at) == ("train", T0, T0)  # not yet SEEN_EVERY
    store.remember_workloads([job, other], T0 + SEEN_EVERY)
    rec = store.workload_info("j1")
    assert rec is not None
    assert (rec.first_seen_at, rec.last_seen_at) == (T0, T0 + SEEN_EVERY)
    renamed = replace(job, name="train-v2", labels={"k": "w"})
    store.remember_workloads([renamed], T0 + SEEN_EVERY + minute)  # rewritten: seen now
    rec = store.workload_info("j1")
    assert rec is not None
    assert (rec.name, rec.labels, rec.last_seen_at) == ("train-v2", {"k": "w"}, T0 + SEEN_EVERY + minute)
    store.remember_workloads([job], T0 + SEEN_EVERY + 2 * minute)  # the old object again: back to it
    rec = store.workload_info("j1")
    assert rec is not None
    assert rec.name == "train"
    untouched = store.workload_info("j2")
    assert untouched is not None
    assert untouched.last_seen_at == T0 + SEEN_EVERY


def test_last_seen_never_lags_past_seen_every_nor_runs_ahead(store: StateStore) -> None:
    job = _job("j1", "train")
    for k in range(0, 31):  # a tick a minute for half an hour
        at = T0 + timedelta(minutes=k)
        store.remember_workloads([job], at)
        rec = store.workload_info("j1")
        assert rec is not None
        assert at - SEEN_EVERY < rec.last_seen_at <= at
    store.remember_workloads([job], T0)  # the clock stepped back (a restored backup, NTP): written
    rec = store.workload_info("j1")
    assert rec is not None
    assert rec.last_seen_at == T0


def test_a_steady_tick_runs_no_statement_until_seen_every_is_due(store: StateStore) -> None:
    jobs = [_job("j1", "train"), _job("j2", "eval")]
    statements: list[str] = []
    event.listen(store._engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    store.remember_workloads(jobs, T0)
    written = len(statements)
    assert written > 0
    store.remember_workloads(list(jobs), T0 + timedelta(minutes=1))  # the same objects
    assert len(statements) == written
    store.remember_workloads(list(jobs), T0 + SEEN_EVERY)  # last_seen_at is due
    assert len(statements) > written
    rec = store.workload_info("j2")
    assert rec is not None
    assert rec.last_seen_at == T0 + SEEN_EVERY


def test_a_write_that_failed_is_made_again_in_full(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job("j1", "train")
    store.remember_workloads([job], T0)
    renamed = [replace(job, name="train-v2")]
    real = store._tx

    def broken(what: str) -> Any:
        raise StoreError(f"{what}: disk full")

    monkeypatch.setattr(store, "_tx", broken)
    with pytest.raises(StoreError):
        store.remember_workloads(renamed, T0 + timedelta(minutes=1))
    monkeypatch.setattr(store, "_tx", real)
    store.remember_workloads(renamed, T0 + timedelta(minutes=2))  # the same list again
    rec = store.workload_info("j1")
    assert rec is not None
    assert rec.name == "train-v2"


def test_workloads_first_seen_at_other_times_are_each_bumped_when_due(store: StateStore) -> None:
    """A steady tick is told by the oldest of the workloads' last_seen_at: one seen earlier than
    the others is bumped when it is due, though they are not."""
    early, late = _job("j1", "train"), _job("j2", "eval")
    minute = timedelta(minutes=1)
    store.remember_workloads([early], T0)
    store.remember_workloads([early, late], T0 + 3 * minute)  # j2 new: seen now
    for k in range(4, 12):
        store.remember_workloads([early, late], T0 + k * minute)  # the same objects each tick
        for job in (early, late):
            rec = store.workload_info(job.id)
            assert rec is not None
            assert T0 + k * minute - SEEN_EVERY < rec.last_seen_at <= T0 + k * minute
    back = T0 + 9 * minute  # the clock stepped back past one of them: neither runs ahead
    store.remember_workloads([early, late], back)
    for job in (early, late):
        rec = store.workload_info(job.id)
        assert rec is not None
        assert rec.last_seen_at <= back
