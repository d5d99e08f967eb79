"""Crash safety with real processes: the agent is SIGKILLed in the middle of a graceful stop
(its checkpoint signal sent, the grace not over, the follow-up pending) and started again on the
same state file."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.models import ActionStatus
from gpusteward.store import audit_chain
from gpusteward.store.db import StateStore

from . import crash_world

AGENT = Path(__file__).with_name("crash_agent.py")


@pytest.fixture
def trainer(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """Holds its "GPU" idle; on SIGUSR1 it notes a checkpoint but keeps running (a slow saver),
    so the stop has to wait out its grace and then send SIGTERM."""
    base = tmp_path / "trainer"
    code = (
        "import signal, time\n"
        f"def note(*_):\n    open({str(base)!r} + '.usr1', 'a').write('x')\n"
        "signal.signal(signal.SIGUSR1, note)\n"
        f"open({str(base)!r} + '.ready', 'w').close()\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, "GPUSTEWARD_CHECKPOINT_SIGNAL": "SIGUSR1"}
    )
    _until(lambda: Path(f"{base}.ready").exists())
    yield child, base
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


def _until(cond, polls: int = 2400) -> None:
    for _ in range(polls):  # a hang guard, not a timing assertion
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition never came true")


def _agent(db: Path, pid: int, start: str, ticks: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, str(AGENT), str(db), str(pid), start, str(ticks), *extra],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )


def test_sigkill_mid_action_then_restart_loses_and_repeats_nothing(tmp_path: Path, trainer) -> None:
    child, base = trainer
    db = tmp_path / "state.db"
    start = datetime.now(tz=UTC).isoformat()  # not before the trainer started (start-up grace)
    log1 = tmp_path / "agent1.log"
    first = _agent(db, child.pid, start, 60, log1, "hang")
    # The graceful stop has begun: the checkpoint signal arrived, the grace is running, and the
    # agent recorded the stop as pending (it then hangs there, so the kill lands mid-stop).
    _until(lambda: Path(f"{base}.usr1").exists() or first.poll() is not None)
    _until(lambda: "graceful stop pending" in log1.read_text() or first.poll() is not None)
    assert first.poll() is None, (tmp_path / "agent1.log").read_text()
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert child.poll() is None  # killed before its SIGTERM

    store = StateStore(f"sqlite:///{db}")
    before = {a.step: a for a in store.actions(limit=100)}
    assert before["graceful-stop"].status is ActionStatus.EXECUTING
    assert before["graceful-stop"].due_at is not None  # pending by design, not a crash leftover
    assert before["warn-1"].status is before["warn-2"].status is ActionStatus.SUCCEEDED
    resume_at = max(a.updated_at for a in before.values()) + timedelta(minutes=1)

    second = _agent(db, child.pid, resume_at.isoformat(), 60, tmp_path / "agent2.log")
    assert second.wait(timeout=300) == 0, (tmp_path / "agent2.log").read_text()
    assert child.wait(timeout=30) == -signal.SIGTERM, "the interrupted stop was finished"

    actions = store.actions(limit=100)
    # One row per step, none lost, none repeated; the pending one completed on its own row,
    # through its follow-up (never begun again: one checkpoint signal, one attempt).
    assert Counter(a.step for a in actions) == {"warn-1": 1, "warn-2": 1, "graceful-stop": 1}
    stop = next(a for a in actions if a.step == "graceful-stop")
    assert (stop.id, stop.status, stop.attempts) == (before["graceful-stop"].id, ActionStatus.SUCCEEDED, 1)
    assert "SIGTERM" in stop.detail
    assert "(verified)" in stop.detail
    trail = [r.event for r in store.audit_log(limit=1000) if r.payload.get("key") == stop.idempotency_key]
    assert trail == ["action.start", "action.pending", "action.succeeded"]
    assert Path(f"{base}.usr1").read_text() == "x"  # the checkpoint signal was sent once
    # The owner was warned twice before, once about the stop per run of it, never re-warned.
    sent = Counter(n.notice.dedup_key for n in store.notices(limit=100) if n.sent)
    assert sent[before["warn-1"].idempotency_key] == sent[before["warn-2"].idempotency_key] == 1
    # The ladder went on from the database: it ends once the workload is gone.
    assert store.load_ladders(dry_run=False) == {}
    assert store.open_findings() == []
    store.close()


def _life(root: Path, kill_at: int | None) -> int:
    """One agent life in a forked child (the imports are paid once); its wait status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            crash_world.run_agent(root, kill_at)
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    return os.waitpid(pid, 0)[1]


def _check_settled(root: Path, kills: list[tuple[str, str]]) -> None:
    store = StateStore(f"sqlite:///{root / 'state.db'}")
    with store.transaction("verify") as conn:
        report = audit_chain.verify(conn)
    assert report.ok, report.problem  # intact, and every action state has its record
    actions = store.actions(limit=1000)
    assert max(Counter(a.idempotency_key for a in actions).values()) == 1
    assert max(Counter((a.workload_id, a.step) for a in actions).values()) == 1  # no step twice
    world = crash_world.World(root).read()
    for wid in crash_world.JOBS:
        mine = [a for a in actions if a.workload_id == wid]
        assert [(a.step, a.status) for a in mine] == [
            ("warn-1", ActionStatus.SUCCEEDED),
            ("warn-2", ActionStatus.SUCCEEDED),
            ("graceful-stop", ActionStatus.SUCCEEDED),
        ]
        assert world[wid]["stopped_by"] == [mine[-1].idempotency_key]  # stopped once, by that step
    assert store.load_ladders(dry_run=False) == {}  # every ladder ended with its workload
    recorded = Counter(n.notice.dedup_key for n in store.notices(limit=1000) if n.sent)
    assert max(recorded.values()) == 1
    # A notice is sent again only when the agent died after sending it and before recording it.
    delivered = Counter((root / "notices.log").read_text().split())
    resent = Counter(key for point, key in kills if key)
    assert all(n - 1 <= resent[key] for key, n in delivered.items()), (delivered, resent)
    store.close()


def test_sigkill_at_random_points_of_the_act_phase_repeats_and_loses_nothing(tmp_path: Path) -> None:
    """Agents on a cluster kept in files, each SIGKILLed at a random call of the act phase (a
    state-store write, an executor or notifier call), restarted on the same state until the
    ladders are done; then a last run without a kill settles what is left."""
    rng = random.Random(20250602)
    kills_in_all = scenarios = 0
    while kills_in_all < 100:
        root = tmp_path / f"s{scenarios}"
        root.mkdir()
        scenarios += 1
        for _ in range(30):  # lives per scenario; each kill lands on or after the last progress
            status = _life(root, rng.randint(1, 60))
            if os.WIFEXITED(status):
                assert os.WEXITSTATUS(status) == 0
                break
            assert os.WTERMSIG(status) == signal.SIGKILL
            kills_in_all += 1
        assert _life(root, None) == 0
        kills_log = root / "kills.log"
        kills = (
            [tuple(line.split("\t")) for line in kills_log.read_text().splitlines()]
            if kills_log.exists()
            else []
        )
        _check_settled(root, kills)  # type: ignore[arg-type]
    assert kills_in_all >= 100
