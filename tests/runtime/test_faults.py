"""Database faults during a tick: no action without its record, back off, resume, lose nothing."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import create_engine, text

from gpusteward.domain.errors import StoreError
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.runtime.driver import StopFlag, run_forever

from .conftest import small_settings


def zombie_of(integration) -> str:
    (wid,) = {
        t.workload_id
        for t in integration.ground_truth.truths()
        if t.behaviour is Behaviour.ZOMBIE and not t.protected
    }
    return wid


def test_actions_table_locked_means_no_action_then_the_ladder_resumes(
    make_steward, run_for, pg_url, tmp_path
):
    # Writers give up after half a second instead of waiting for the lock.
    url = pg_url.replace("options=", "options=-clock_timeout%3D500%20")
    settings = small_settings(tmp_path / "unused.db", store={"url": url})
    steward, integration, clock, notifier = make_steward(settings)
    zombie = zombie_of(integration)
    run_for(steward, clock, minutes=5)  # seen; its first warning is due at minute 7
    assert steward.store.actions(limit=100) == []

    locker = create_engine(pg_url)
    with locker.connect() as conn:
        # Another session holds the actions table: reads work, no action can be recorded.
        conn.execute(text("LOCK TABLE actions IN SHARE MODE"))
        failed = []
        for _ in range(10):
            try:
                steward.tick()
            except StoreError as e:  # from minute 7 on, every tick: its warning cannot be recorded
                failed.append(str(e))
            clock.advance(60)
        assert len(failed) == 8
        assert all(e.startswith("plan action") for e in failed)
        assert notifier.sent == []  # nobody was told anything without a record
        assert integration.ground_truth.ending(zombie) is None
        conn.rollback()
    locker.dispose()

    run_for(steward, clock, minutes=40)
    actions = steward.store.actions(limit=100, workload_id=zombie)
    assert [a.step for a in actions] == ["warn-1", "warn-2", "graceful-stop"]  # the first warning is not lost
    assert max(Counter(a.idempotency_key for a in steward.store.actions(limit=1000)).values()) == 1
    assert [n.workload_id for n in notifier.sent].count(zombie) == 3


def test_the_loop_backs_off_while_ticks_fail_and_resumes(make_steward, monkeypatch):
    steward, _, clock, _ = make_steward()
    real = steward.store.remember_workloads
    fails = iter([True, True, True])

    def flaky(*args, **kwargs):
        if next(fails, False):
            raise StoreError("remember workloads: database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(steward.store, "remember_workloads", flaky)
    start = clock.monotonic()
    ticks = run_forever(steward, 60, StopFlag(), max_ticks=5, real_sleep=False)
    assert ticks == 5
    # 2, 4, then 8 intervals capped at backoff_max_s (300 s), then back to one interval.
    assert clock.monotonic() - start == 120 + 240 + 300 + 60
    assert steward.store.find_workloads("")  # the ticks after the fault went through
