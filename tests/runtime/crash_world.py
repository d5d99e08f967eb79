"""A tiny cluster kept in files, and an agent on it that SIGKILLs itself at a chosen point of
the act phase (``test_crash.py``'s crash-point test).

The world (``world.json``, replaced atomically) lists idle jobs on one GPU each; the executor
stops a job by rewriting it, so a stop is one atomic effect that survives the agent. Notices
go to ``notices.log`` (one line each, appended). The agent's clock moves a minute per tick and
resumes after the last tick it began (``clock.txt``). ``run_agent`` is called in a forked child:
it counts the calls of the act phase (state-store writes, executor and notifier calls, before
and after each) and at call ``kill_at`` logs the point and SIGKILLs its own process.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpusteward.domain.integration import Integration
from gpusteward.domain.models import (
    Decision,
    Gpu,
    Level,
    Notice,
    Observation,
    Outcome,
    Owner,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings

START = datetime(2025, 6, 2, 9, 0, tzinfo=UTC)
JOBS = ("job-a", "job-b", "job-c", "job-d")
#: State-store writes of the act phase (and around it) where a kill is tried.
STORE_WRITES = (
    "record_findings",
    "close_findings",
    "update_ladders",
    "plan_action",
    "start_action",
    "pend_action",
    "finish_action",
    "record_notice",
    "record_decisions",
    "remember_workloads",
)


class World:
    def __init__(self, root: Path) -> None:
        self.path = root / "world.json"
        if not self.path.exists():
            self._write({j: {"running": True, "stopped_by": []} for j in JOBS})

    def read(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)  # atomic: a stop happened or it did not

    def stop(self, wid: str, key: str) -> bool:
        data = self.read()
        if not data[wid]["running"]:
            return False
        data[wid] = {"running": False, "stopped_by": [*data[wid]["stopped_by"], key]}
        self._write(data)
        return True


def _gpu(wid: str) -> Gpu:
    return Gpu(f"GPU-{wid}", "node-1", JOBS.index(wid), "NVIDIA A100-SXM4-80GB", 81_920.0, price_per_hour=2.0)


def _job(wid: str) -> Workload:
    return Workload(
        wid,
        WorkloadKind.JOB,
        f"train-{wid}",
        Owner(f"user-{wid}", "ml"),
        1,
        (f"GPU-{wid}",),
        START - timedelta(hours=6),
    )


class WorldSource:
    name = "world"

    def __init__(self, world: World) -> None:
        self.world = world

    def observe(self, now: datetime) -> Observation:
        running = [w for w, s in self.world.read().items() if s["running"]]
        samples = tuple(
            Sample(f"GPU-{w}", now, gpu_util_pct=0.0, mem_used_mib=20_480.0 if w in running else 0.0)
            for w in JOBS
        )
        return Observation(now, tuple(_gpu(w) for w in JOBS), samples, tuple(_job(w) for w in running))

    def history(self, start: datetime, end: datetime, step_s: float) -> list[Observation]:
        out, at = [], start
        while at < end:
            out.append(self.observe(at))
            at += timedelta(seconds=step_s)
        return out

    def close(self) -> None:
        return None


class WorldExecutor:
    name = "world"

    def __init__(self, world: World) -> None:
        self.world = world

    def supports(self, workload: Workload, level: Level) -> bool:
        return level >= Level.GRACEFUL_STOP

    def current(self, workload: Workload) -> Workload | None:
        return workload if self.world.read().get(workload.id, {}).get("running") else None

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        self.world.stop(workload.id, decision.idempotency_key)
        return Outcome(True, f"stopped {workload.id}", verified=True)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        return self.current(workload) is None


class FileNotifier:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.unrecorded = ""  # delivered, not yet recorded in the store

    def send(self, notice: Notice) -> None:
        with self.path.open("a") as f:
            f.write(notice.dedup_key + "\n")
        self.unrecorded = notice.dedup_key


def _settings(db: Path) -> Any:
    return load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        store={"url": f"sqlite:///{db}"},
        policy={
            "startup_grace_minutes": 0,
            "ladder": {"warn_again_after_minutes": 1, "graceful_stop_after_minutes": 2},
            "budget": {"max_gpu_share_per_hour": 1.0},
        },
    )


def run_agent(root: Path, kill_at: int | None, max_ticks: int = 12) -> None:
    """One agent's life on ``root``: ticks until the world is settled, or SIGKILL at call ``kill_at``."""
    world = World(root)
    clock_file = root / "clock.txt"
    at = (
        datetime.fromisoformat(clock_file.read_text()) + timedelta(minutes=1)
        if clock_file.exists()
        else START
    )

    class Clock:
        def now(self) -> datetime:
            return at

        def monotonic(self) -> float:
            return (at - START).total_seconds()

        def sleep(self, seconds: float) -> None:
            return None

    source = WorldSource(world)
    notifier = FileNotifier(root / "notices.log")
    integration = Integration("world", source, executors=[WorldExecutor(world)], history=source.history)
    steward, _ = build_steward(
        _settings(root / "state.db"), clock=Clock(), notifier=notifier, integration=integration
    )
    calls = 0

    def point(name: str) -> None:
        nonlocal calls
        calls += 1
        if calls == kill_at:
            with (root / "kills.log").open("a") as f:
                f.write(f"{name}\t{notifier.unrecorded}\n")
            os.kill(os.getpid(), signal.SIGKILL)

    def hooked(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            point(f"{name}:before")
            out = fn(*args, **kwargs)
            if name == "record_notice":
                notifier.unrecorded = ""
            point(f"{name}:after")
            return out

        return call

    for name in STORE_WRITES:
        setattr(steward.store, name, hooked(name, getattr(steward.store, name)))
    executor = steward.runner.executors[0]
    executor.execute = hooked("execute", executor.execute)  # type: ignore[method-assign]
    notifier.send = hooked("send", notifier.send)  # type: ignore[method-assign]
    for _ in range(max_ticks):
        tmp = clock_file.with_suffix(".tmp")
        tmp.write_text(at.isoformat())
        tmp.replace(clock_file)
        steward.tick()
        if not any(s["running"] for s in world.read().values()) and not steward.store.load_ladders(False):
            break
        at += timedelta(minutes=1)
    steward.store.close()
