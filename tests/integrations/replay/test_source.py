"""The replay source feeds the loop the trace's own sample times; its executor "stops" by releasing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import Decision, Level
from gpusteward.domain.ports import Executor, Source
from gpusteward.integrations.replay import REF_KEY, ReplayExecutor, ReplaySource, load_trace

SMALL = Path(__file__).resolve().parents[2] / "fixtures" / "replay" / "generic_small.csv"
T10 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T10 + timedelta(minutes=minutes)


def decision(wid: str, level: Level = Level.GRACEFUL_STOP, when: datetime = T10) -> Decision:
    return Decision(
        wid, when, level, "graceful-stop", "test", rule="idle-allocation", idempotency_key=f"{wid}:k"
    )


def test_it_is_a_source_and_an_executor() -> None:
    source = ReplaySource(load_trace(SMALL))
    assert isinstance(source, Source)
    assert isinstance(ReplayExecutor(source), Executor)
    source.close()


def test_observe_returns_new_samples_at_their_own_times() -> None:
    source = ReplaySource(load_trace(SMALL))
    first = source.observe(at(0))
    assert [g.uuid for g in first.gpus] == ["GPU-a", "GPU-b", "GPU-c"]
    by_gpu = {s.gpu_uuid: s for s in first.samples}
    assert set(by_gpu) == {"GPU-a", "GPU-b", "GPU-c"}
    a = by_gpu["GPU-a"]
    assert (a.at, a.gpu_util_pct, a.mem_used_mib, a.power_w) == (T10, 95, 40960, pytest.approx(310.5))
    assert a.sm_active_pct == pytest.approx(91)
    assert a.temp_c is None  # not in the trace: None, never 0
    assert {w.id for w in first.workloads} == {"job-1", "job-2"}  # GPU-c is nobody's
    job1 = next(w for w in first.workloads if w.id == "job-1")
    assert job1.gpu_uuids == ("GPU-a",)
    assert job1.started_at == at(-30)
    assert job1.owner.team == "vision"
    assert job1.ref[REF_KEY] == "0"  # its index in the trace: workloads sorted by id
    second = source.observe(at(1))
    assert sorted((s.gpu_uuid, s.at) for s in second.samples) == [
        ("GPU-a", at(1)),
        ("GPU-b", at(1)),
        ("GPU-c", at(1)),
    ]
    b = next(s for s in second.samples if s.gpu_uuid == "GPU-b")
    assert b.gpu_util_pct is None  # an empty cell: missing, not 0


def test_a_gpu_in_a_gap_gets_no_fresh_looking_sample() -> None:
    source = ReplaySource(load_trace(SMALL))
    for m in range(0, 10):
        obs = source.observe(at(m))
        b = [s for s in obs.samples if s.gpu_uuid == "GPU-b"]
        if 3 <= m < 10:
            assert b == []  # its last sample (10:02) was sent once, at its own time
    late = source.observe(at(10))
    assert [s.at for s in late.samples if s.gpu_uuid == "GPU-b"] == [at(10)]
    assert [w.id for w in late.workloads] == ["job-2"]  # job-1's last sample was 10:03


def test_the_first_observation_looks_back_one_interval_and_time_may_restart() -> None:
    source = ReplaySource(load_trace(SMALL))
    obs = source.observe(at(2.5))
    assert sorted(s.at for s in obs.samples) == [at(2), at(2.5)]  # not 10:00 or 10:01
    again = source.observe(at(1))  # the clock went back: read again from there
    assert {s.at for s in again.samples} == {at(1)}


def test_offset_shifts_the_trace_in_time() -> None:
    trace = load_trace(SMALL)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    source = ReplaySource(trace, offset_s=now.timestamp() - trace.start)
    obs = source.observe(now)
    assert {s.at for s in obs.samples} == {now}
    assert next(w for w in obs.workloads if w.id == "job-1").started_at == now - timedelta(minutes=30)
    assert len(source.history(now - timedelta(minutes=2), now, 60)) == 2


def test_a_stop_releases_the_workload_from_then_on() -> None:
    source = ReplaySource(load_trace(SMALL))
    executor = ReplayExecutor(source)
    obs = source.observe(at(1))
    job2 = next(w for w in obs.workloads if w.id == "job-2")
    assert executor.supports(job2, Level.GRACEFUL_STOP)
    assert executor.supports(job2, Level.FORCE)
    assert not executor.supports(job2, Level.NOTIFY)
    assert executor.current(job2) == job2
    out = executor.execute(decision("job-2"), job2)
    assert out.ok
    assert out.verified
    assert out.released_gpu_uuids == ("GPU-b",)
    assert executor.verify(decision("job-2"), job2)
    assert executor.current(job2) is None
    assert [(s.workload_id, s.at_t, s.level) for s in executor.stops] == [
        ("job-2", at(1).timestamp(), Level.GRACEFUL_STOP)
    ]
    again = executor.execute(decision("job-2", Level.FORCE), job2)
    assert "already released" in again.detail
    assert len(executor.stops) == 1
    later = source.observe(at(10))
    assert "GPU-b" not in {s.gpu_uuid for s in later.samples}
    assert "job-2" not in {w.id for w in later.workloads}


def test_the_executor_refuses_what_is_not_its_own() -> None:
    source = ReplaySource(load_trace(SMALL))
    job1 = next(w for w in source.observe(at(0)).workloads if w.id == "job-1")
    other = ReplayExecutor(ReplaySource(load_trace(SMALL), name="other"))
    assert not other.supports(job1, Level.FORCE)
    with pytest.raises(ExecutionError, match="not a workload of the other trace"):
        other.execute(decision("job-1"), job1)
    with pytest.raises(ExecutionError, match="not a stop"):
        ReplayExecutor(source).execute(decision("job-1", Level.NOTIFY), job1)
    assert source.index_of(job1) == 0
    assert source.holds(0)  # refusing touched nothing
