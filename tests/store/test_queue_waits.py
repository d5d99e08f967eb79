"""Queue waits in the store (issue 16): one row per started job however many ticks saw it, on
SQLite, PostgreSQL and in memory, and the migration that adds the table to a database at 0002."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, func, inspect, select
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.models import Decision, Level
from gpusteward.domain.queue import StartedWait
from gpusteward.domain.store_ports import QUEUE_WAITS_KEPT, QueueWaitLog
from gpusteward.store import schema
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import queue_waits_t
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
H = timedelta(hours=1)


def _url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return (
        f"sqlite:///{tmp_path / 'state.db'}" if kind == "sqlite" else str(request.getfixturevalue("pg_url"))
    )


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueWaitLog]:
    if request.param == "memory":
        yield MemoryStore()
        return
    s = StateStore(_url(request.param, request, tmp_path))
    s.create_schema()
    yield s
    s.close()


def _wait(
    job: str,
    started: datetime,
    waited_s: float = 60.0,
    source: str = "slurm",
    queue: str = "gpu",
    gpus: int = 2,
) -> StartedWait:
    return StartedWait(job, queue, waited_s, started, gpus, source)


def test_waits_round_trip_in_start_order_within_the_period(store: QueueWaitLog) -> None:
    a = _wait("101", T0 + 2 * H, 30.5, queue="a100", gpus=4)
    b = _wait("7", T0, 600.0, source="k8s", queue="ml/ns")
    late = _wait("102", T0 + 5 * H)
    store.record_queue_waits([a, b, late], T0 + 6 * H)
    assert store.queue_waits(T0, T0 + 5 * H) == [b, a]  # [since, until): the one at until is out
    assert store.queue_waits(T0 + H, T0 + 6 * H) == [a, late]
    assert store.queue_waits(T0 + 6 * H, T0 + 7 * H) == []
    # Times come back aware UTC, whatever zone they went in with.
    assert store.queue_waits(T0, T0 + H)[0].started_at.tzinfo is not None


def test_a_job_seen_by_many_ticks_is_kept_once_first_sighting_wins(store: QueueWaitLog) -> None:
    first = _wait("55", T0, 120.0)
    for tick in range(5):  # every tick of the source's look-back shows the job again
        again = _wait("55", T0, 999.0)  # a later reading of the same job cannot change its wait
        store.record_queue_waits([first, again], T0 + tick * timedelta(minutes=1))
    assert store.queue_waits(T0 - H, T0 + H) == [first]
    # The same id from another source is another job.
    other = _wait("55", T0, 5.0, source="k8s")
    store.record_queue_waits([first, other], T0 + H)
    assert sorted((w.source, w.waited_s) for w in store.queue_waits(T0 - H, T0 + H)) == [
        ("k8s", 5.0),
        ("slurm", 120.0),
    ]


def test_waits_older_than_the_retention_are_forgotten(store: QueueWaitLog) -> None:
    old, recent = _wait("1", T0), _wait("2", T0 + 10 * H)
    store.record_queue_waits([old, recent], T0 + 11 * H)
    later = T0 + QUEUE_WAITS_KEPT + H  # old is past the retention, recent is not
    store.record_queue_waits([], later)
    assert store.queue_waits(T0 - H, later) == [recent]


def test_the_sql_table_holds_one_row_per_job(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    for kind in ("sqlite", "postgresql"):
        s = StateStore(_url(kind, request, tmp_path))
        s.create_schema()
        s.record_queue_waits([_wait("9", T0)] * 3, T0)
        s.record_queue_waits([_wait("9", T0, 1.0)], T0 + H)
        with s.transaction("count") as conn:
            assert conn.execute(select(func.count()).select_from(queue_waits_t)).scalar() == 1, kind
        s.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_database_at_0002_upgrades_keeping_its_records(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(kind, request, tmp_path)
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0002")
    engine.dispose()
    old = StateStore(url)
    decision = Decision("w1", T0, Level.NOTIFY, "notify", "idle", rule="idle", idempotency_key="w1:e:notify")
    assert old.record_decisions([decision]) == 1
    with old.transaction("before") as conn:
        assert schema.current(conn) == "0002"
        assert "queue_waits" not in inspect(conn).get_table_names()
    old.close()

    monkeypatch.setenv("GPUSTEWARD_STORE__URL", url)
    result = CliRunner().invoke(app, ["db", "upgrade", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["from"], out["to"]) == ("0002", schema.head())
    new = StateStore(url)
    assert [d.idempotency_key for d in new.decisions_for("w1")] == ["w1:e:notify"]
    new.record_queue_waits([_wait("1", T0)], T0)
    assert new.queue_waits(T0, T0 + H) == [_wait("1", T0)]
    new.close()
