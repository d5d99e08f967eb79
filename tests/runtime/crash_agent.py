"""The agent the SIGKILL test runs as a real process: ``python crash_agent.py DB PID START TICKS [hang]``.

The ``nvml`` source over a fake NVML that lists one real process (``PID``) holding 20 GiB at
0 %, the process executor acting on it for real, and a clock whose wall time moves a minute
per tick (ladders climb in seconds) while the executor's waits take real time. With ``hang`` it
stops ticking once a graceful stop is under way (begun, its follow-up pending), waiting to be
killed there.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta

from gpusteward.domain.models import ActionStatus
from gpusteward.integrations.nvml.build import build as build_nvml
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context


class StepClock:
    def __init__(self, start: datetime) -> None:
        self.at = start

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def main() -> None:
    db, pid, start, ticks = (
        sys.argv[1],
        int(sys.argv[2]),
        datetime.fromisoformat(sys.argv[3]),
        int(sys.argv[4]),
    )
    hang = sys.argv[5:] == ["hang"]
    procs = ProcReader()

    def node() -> FakeNode:
        info = procs.read(pid)
        held = [FakeProcess(pid, 20_480)] if info is not None and not info.exited else []
        used = 20_480 + 500 if held else 500
        gpu = FakeGpu("GPU-z", "NVIDIA A100-SXM4-80GB", 81_920, used, 0, 0, 62, 33, 0, 0, processes=held)
        return FakeNode([gpu])

    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        source={"name": "nvml", "nvml": {"node": "ws-1", "allow_root": True, "term_wait_seconds": 10}},
        store={"url": f"sqlite:///{db}"},
        policy={
            "startup_grace_minutes": 0,
            "ladder": {
                "warn_again_after_minutes": 1,
                "graceful_stop_after_minutes": 2,
                "stop_grace_seconds": 6,
            },
            "budget": {"max_gpu_share_per_hour": 1.0},
        },
    )
    clock = StepClock(start)
    steward, _ = build_steward(
        settings,
        clock=clock,
        integration=build_nvml(settings.source.nvml, build_context(settings, clock), lib=FakeNvmlLib(node)),
    )
    for i in range(ticks):
        report = steward.tick()
        done = [f"{a.decision.step}={a.status.value}" for a in report.actions]
        print(
            f"tick {i} at {clock.now().isoformat()} findings={len(report.findings)} actions={done}",
            flush=True,
        )
        if hang and any(a.status is ActionStatus.EXECUTING for a in report.actions):
            print("graceful stop pending: waiting to be killed", flush=True)
            time.sleep(600)
        if procs.read(pid) is None and i > 0 and not report.findings:
            print("target gone", flush=True)
            break
        clock.at += timedelta(seconds=60)


if __name__ == "__main__":
    main()
