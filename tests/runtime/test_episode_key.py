"""The idempotency key of a ladder's steps survives a failure between acting and saving the
ladder: the episode that names the keys is stored before the first step runs."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest

from gpusteward.domain.errors import StoreError


def test_a_ladder_save_that_fails_after_the_first_warning_repeats_no_warning(
    make_steward, run_for, monkeypatch: pytest.MonkeyPatch
) -> None:
    steward, _, clock, notifier = make_steward()
    store = steward.store
    real = store.update_ladders
    failed: list[str] = []

    def disk_full_once(save: Any, clear: Any, *, dry_run: bool) -> None:
        states = list(save)
        if not failed and any(s.step == "warn-1" for s in states):
            failed.append(",".join(s.workload_id for s in states if s.step == "warn-1"))
            raise StoreError("save ladders: database or disk is full")
        real(states, clear, dry_run=dry_run)

    monkeypatch.setattr(store, "update_ladders", disk_full_once)
    reports = []
    for _ in range(40):
        with contextlib.suppress(StoreError):  # the tick fails as a whole; the next one retries
            reports.append(steward.tick())
        clock.advance(60)
    assert failed, "no first warning was ever saved"
    actions = store.actions(limit=1000)
    assert actions, "nothing acted"
    steps = Counter((a.workload_id, a.step) for a in actions)
    assert max(steps.values()) == 1, [k for k, n in steps.items() if n > 1]
    assert max(Counter(a.idempotency_key for a in actions).values()) == 1
    warned = Counter(n.dedup_key for n in notifier.sent)
    assert max(warned.values()) == 1
    # The ladder of the workload warned in the failed tick is where it should be: past warn-1.
    for wid in failed[0].split(","):
        assert next(a.step for a in actions if a.workload_id == wid) == "warn-1"
        assert store.load_ladders(dry_run=False)[wid].step != ""
