"""One ``gpusteward run`` per SQLite file: a second one stops at once, naming the first's pid;
the lock goes with the process however it ends. ``audit verify`` reports a log missing an
action's record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import ActionStatus, Decision, Level
from gpusteward.store.db import StateStore
from gpusteward.store.writer_lock import hold_writer_lock, lock_path


def _config(tmp_path: Path) -> tuple[Path, str]:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    config = tmp_path / "gpusteward.yaml"
    config.write_text(
        f"source: {{name: sim, sim: {{scenario: small, history_hours: 0}}}}\ntick_seconds: 3600\n"
        f"store: {{url: '{url}'}}\n"
    )
    return config, url


def _until(cond, polls: int = 1200) -> None:
    for _ in range(polls):  # a hang guard, not a timing assertion
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition never came true")


def test_a_second_run_on_the_same_sqlite_file_stops_naming_the_first(tmp_path: Path) -> None:
    config, url = _config(tmp_path)
    lock = tmp_path / "state.db.lock"
    first = subprocess.Popen(
        [sys.executable, "-m", "gpusteward", "run", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        _until(
            lambda: first.poll() is not None or (lock.exists() and lock.read_text().strip() == str(first.pid))
        )
        assert first.poll() is None
        result = CliRunner().invoke(app, ["run", "--config", str(config), "--max-ticks", "1"])
        assert result.exit_code == 1
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        assert f"another gpusteward run (pid {first.pid})" in lines[0]
        assert str(tmp_path / "state.db") in lines[0]
        assert first.poll() is None  # the first one goes on
        first.send_signal(signal.SIGKILL)  # no chance to clean up: the kernel frees the lock
        first.wait(timeout=30)
    finally:
        first.kill()
        first.wait(timeout=30)
    again = hold_writer_lock(url)
    assert again is not None
    with pytest.raises(StoreError, match=f"pid {os.getpid()}"):
        # The same process opening it twice is refused too (flock is per open file).
        hold_writer_lock(url)
    again.release()
    hold_writer_lock(url).release()  # type: ignore[union-attr]


def test_only_sqlite_files_take_the_lock(tmp_path: Path) -> None:
    assert lock_path(f"sqlite:///{tmp_path / 'a.db'}") == tmp_path / "a.db.lock"
    assert lock_path("sqlite://") is None
    assert lock_path("sqlite:///:memory:") is None
    # PostgreSQL replicas elect a leader instead (ha.leader_election: postgres).
    assert lock_path("postgresql+psycopg://u@127.0.0.1:5432/test") is None


def test_audit_verify_fails_on_an_action_without_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = _config(tmp_path)
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", url)
    monkeypatch.setenv("COLUMNS", "200")
    store = StateStore(url)
    store.create_schema()
    now = datetime.now(tz=UTC)
    d = Decision("job-1", now, Level.NOTIFY, "warn-1", "idle", idempotency_key="job-1:1:1:warn-1")
    action = store.plan_action(d, dry_run=False, at=now)
    assert action is not None
    store.start_action(action.id, now)  # both written as a second writer once left them
    store.finish_action(action.id, ActionStatus.SUCCEEDED, "sent", now)
    store.close()
    result = CliRunner().invoke(app, ["audit", "verify"])
    assert result.exit_code == 1
    assert "audit log incomplete" in result.output
    assert "job-1:1:1:warn-1" in result.output
