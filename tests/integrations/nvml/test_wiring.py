"""``source: nvml`` in the loop: wiring, the no-driver message, and a zombie found and stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Level
from gpusteward.integrations.nvml.build import build as build_nvml
from gpusteward.integrations.nvml.executor import ProcessExecutor
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.source import NvmlSource
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import REGISTRY, build_context

from .conftest import capture


class StepClock:
    """Wall time that jumps a tick at a time; real monotonic time and sleep for the executor's waits."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_nvml_is_registered_and_builds_a_source_and_a_process_executor(tmp_path: Path) -> None:
    assert "nvml" in REGISTRY
    settings = load_settings(
        None,
        source={"name": "nvml", "nvml": {"node": "gpu-07", "protected_users": ["carol"]}},
        policy={"ladder": {"stop_grace_seconds": 42}, "protect": {"users": ["dave"]}},
        store={"url": f"sqlite:///{tmp_path / 's.db'}"},
    )
    integration = build_nvml(
        settings.source.nvml,
        build_context(settings, StepClock(datetime.now(tz=UTC))),
        lib=FakeNvmlLib(capture("linux-x86_64__nvidia-h200__590.48.01", "load")),
    )
    assert isinstance(integration.source, NvmlSource)
    assert integration.source.node == "gpu-07"
    (ex,) = integration.executors
    assert isinstance(ex, ProcessExecutor)
    assert ex.grace_s == 42
    assert ex.protected_users == {"carol", "dave"}
    assert not ex.allow_root
    now = datetime.now(tz=UTC)
    assert integration.history(now - timedelta(hours=1), now, 30) == []


def test_unknown_nvml_keys_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="proc_rot"):
        load_settings(None, source={"nvml": {"proc_rot": "/host/proc"}})


def test_scan_without_a_driver_fails_at_start_with_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present: there is no failure to see")
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("COLUMNS", "400")
    result = CliRunner().invoke(app, ["scan", "--source", "nvml"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "no NVIDIA driver" in lines[0]
    assert "--source sim" in lines[0]
    assert "prometheus" in lines[0]


def test_the_exporter_command_without_a_driver_fails_the_same_way(tmp_path: Path) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present: there is no failure to see")
    result = CliRunner().invoke(app, ["exporter", "--port", "0", "--address", "127.0.0.1"])
    assert result.exit_code == 1
    assert "no NVIDIA driver" in result.output
    assert "--source sim" in result.output
    help_text = CliRunner().invoke(app, ["exporter", "--help"]).output
    assert "--port" in help_text
    assert "9835" in help_text


@pytest.fixture
def zombie(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real process that saves a checkpoint on SIGUSR1 and exits; it "holds" 20 GiB at 0 %."""
    base = tmp_path / "trainer"
    code = (
        "import signal, sys, time\n"
        f"def save(*_):\n    open({str(base)!r} + '.ckpt', 'w').close(); sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, save)\n"
        f"open({str(base)!r} + '.ready', 'w').close()\n"
        "time.sleep(300)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, "GPUSTEWARD_CHECKPOINT_SIGNAL": "SIGUSR1"}
    )
    for _ in range(1200):  # hang guard
        if Path(f"{base}.ready").exists():
            break
        time.sleep(0.05)
    yield child, base
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


def test_an_idle_process_holding_gpu_memory_is_warned_then_stopped_with_its_checkpoint(
    zombie: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    child, base = zombie
    procs = ProcReader()

    def node() -> FakeNode:
        info = procs.read(child.pid)
        held = [FakeProcess(child.pid, 20_480)] if info is not None and not info.exited else []
        used = 20_480 + 500 if held else 500
        return FakeNode(
            [FakeGpu("GPU-z", "NVIDIA A100-SXM4-80GB", 81_920, used, 0, 0, 62, 33, 0, 0, processes=held)]
        )

    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        source={"name": "nvml", "nvml": {"node": "ws-1", "allow_root": True}},
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        policy={
            "startup_grace_minutes": 0,
            "ladder": {
                "warn_again_after_minutes": 1,
                "graceful_stop_after_minutes": 2,
                "stop_grace_seconds": 20,
            },
            "budget": {"max_gpu_share_per_hour": 1.0},
        },
    )
    clock = StepClock(datetime.now(tz=UTC))
    notifier = MemoryNotifier()
    steward, _ = build_steward(
        settings,
        clock=clock,
        notifier=notifier,
        integration=build_nvml(settings.source.nvml, build_context(settings, clock), lib=FakeNvmlLib(node)),
    )
    stops = []
    findings_at = None
    for tick in range(60):
        report = steward.tick()
        if report.findings and findings_at is None:
            findings_at = tick
            # It sleeps: 0 % GPU and ~0 % CPU, so the 10-minute stalled rule trips before zombie.
            assert {f.rule for f in report.findings} == {"stalled"}
            assert report.findings[0].workload_id == f"process:ws-1:{child.pid}"
        stops += [a for a in report.actions if a.decision.level is Level.GRACEFUL_STOP]
        if stops:
            break
        clock.advance(60)
    assert findings_at is not None
    # 80 % of the 10-minute window must be covered first; the first tick has no CPU rate yet.
    assert findings_at >= 8
    (stop,) = stops
    # Begun: the checkpoint signal went out and the tick returned; its follow-up is pending.
    assert stop.status.value == "executing", stop.detail
    assert child.wait(timeout=10) == 0  # it saved and exited within its grace
    assert Path(f"{base}.ckpt").exists()
    clock.advance(60)  # past the 20 s grace: the next tick completes the stop
    (done,) = [a for a in steward.tick().actions if a.decision.level is Level.GRACEFUL_STOP]
    assert (done.action_id, done.status.value) == (stop.action_id, "succeeded"), done.detail
    assert "gone" in done.detail
    assert len(notifier.sent) >= 2  # warned, then told of the stop
