"""A spot interruption through the whole tick: the emulated IMDSv2 marks the instance, and real
child processes on the node (the nvml integration over the capture-replaying fake NVML library)
get their checkpoint signal at once and write their checkpoint before the deadline; nothing is
stopped; the audit says what was done and how long it took; owners are told."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ActionStatus, Decision, Level
from gpusteward.integrations.cloud.interruption.build import build_watch
from gpusteward.integrations.cloud.interruption.emulator import MetadataEmulator
from gpusteward.integrations.nvml.build import build as build_nvml
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.interruption_advice import InterruptionRecord
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.registry import build_context, build_integration
from gpusteward.store.memory import MemoryStore

NODE = "spot-1"
#: Saves a checkpoint (one line: when) on every SIGUSR1 and goes on running, as a trainer does.
TRAINER = """
import signal, sys, time
out = sys.argv[1]
def save(signum, frame):
    with open(out + ".ckpt", "a") as f:
        f.write("%f\\n" % time.time())
signal.signal(signal.SIGUSR1, save)
open(out + ".ready", "w").close()
while True:
    time.sleep(1)
"""


class StepClock:
    """Wall time that moves when told (from the real now); real monotonic time and sleep."""

    def __init__(self) -> None:
        self.at = datetime.now(tz=UTC)

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class Children:
    """Real processes, each "holding" one of the node's GPUs in the fake NVML library."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[tuple[subprocess.Popen[bytes], Path, str]] = []
        self.reader = ProcReader()

    def start(self, gpu: str, *, signal_name: str | None = "SIGUSR1") -> tuple[subprocess.Popen[bytes], Path]:
        base = self.root / f"p{len(self.procs)}"
        env = {**os.environ}
        env.pop("GPUSTEWARD_CHECKPOINT_SIGNAL", None)
        if signal_name:
            env["GPUSTEWARD_CHECKPOINT_SIGNAL"] = signal_name
        child = subprocess.Popen([sys.executable, "-c", TRAINER, str(base)], env=env)
        self.procs.append((child, base, gpu))
        for _ in range(1200):  # hang guard, not a time limit on the code under test
            if Path(f"{base}.ready").exists():
                break
            time.sleep(0.05)
        assert Path(f"{base}.ready").exists()
        return child, base

    def node(self) -> FakeNode:
        gpus = sorted({g for _, _, g in self.procs})
        out = []
        for k, uuid in enumerate(gpus):
            held = [
                FakeProcess(c.pid, 4096)
                for c, _, g in self.procs
                if g == uuid and (i := self.reader.read(c.pid)) is not None and not i.exited
            ]
            out.append(
                FakeGpu(uuid, "NVIDIA H100 80GB HBM3", 81_559, 8192, 90, 40, 400, 60, k, 0, processes=held)
            )
        return FakeNode(out)

    def stop_all(self) -> None:
        for child, _, _ in self.procs:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    c = Children(tmp_path)
    yield c
    c.stop_all()


@pytest.fixture
def md() -> Iterator[MetadataEmulator]:
    with MetadataEmulator() as server:
        yield server


def settings_for(md: MetadataEmulator, **over: object) -> Settings:
    data: dict[str, object] = {
        "tick_seconds": 10,
        "source": {"name": "nvml", "nvml": {"node": NODE, "allow_root": True}},
        "cloud": {"provider": "aws", "interruption": {"metadata_url": md.url, "poll_seconds": 0.001}},
    }
    data.update(over)
    return load_settings(None, **data)


MakeSteward = Callable[..., tuple[Steward, MemoryStore, MemoryNotifier, StepClock]]


@pytest.fixture
def make_steward(md: MetadataEmulator, children: Children) -> MakeSteward:
    def make(**over: object) -> tuple[Steward, MemoryStore, MemoryNotifier, StepClock]:
        settings = settings_for(md, **over)
        clock = StepClock()
        integration = build_nvml(
            settings.source.nvml, build_context(settings, clock), lib=FakeNvmlLib(children.node)
        )
        # What the registry attaches to a node agent's integration (tested below).
        integration.interruptions = build_watch(settings.cloud, clock, node=NODE)
        store, notifier = MemoryStore(), MemoryNotifier()
        steward, _ = build_steward(
            settings, clock=clock, notifier=notifier, store=store, integration=integration
        )
        return steward, store, notifier, clock

    return make


def _events(store: MemoryStore, kind: str) -> list[dict[str, object]]:
    return [dict(r.payload) for r in store.audit_log(limit=1000) if r.event == kind]


def _saved(base: Path) -> list[float]:
    p = Path(f"{base}.ckpt")
    for _ in range(200):  # the handler runs a moment after the signal; hang guard only
        if p.exists() and p.read_text().endswith("\n"):
            break
        time.sleep(0.05)
    return [float(x) for x in p.read_text().split()] if p.exists() else []


def test_every_process_on_the_node_checkpoints_before_the_deadline_even_in_dry_run(
    make_steward: MakeSteward, children: Children, md: MetadataEmulator
) -> None:
    trainers = [children.start(f"GPU-{g}") for g in range(2) for _ in range(2)]
    silent, silent_base = children.start("GPU-1", signal_name=None)
    steward, store, notifier, clock = make_steward()  # mode: dry-run (the default)
    assert steward.dry_run
    steward.tick()
    assert _events(store, "interruption.notice") == []
    assert all(not Path(f"{b}.ckpt").exists() for _, b in trainers)

    deadline = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(minutes=2)
    md.state.aws_action = {"action": "terminate", "time": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
    clock.advance(10)
    steward.tick()

    for child, base in trainers:
        saved = _saved(base)
        assert len(saved) == 1, base  # one checkpoint signal each
        assert saved[0] < deadline.timestamp()
        assert child.poll() is None  # checkpointed, not stopped
    assert silent.poll() is None
    assert not Path(f"{silent_base}.ckpt").exists()

    [notice] = _events(store, "interruption.notice")
    assert notice["node"] == NODE
    assert notice["instance"] == md.state.instance_id
    [done] = _events(store, "interruption.checkpoints")
    assert done["workloads"] == 5
    assert done["signalled"] == 4
    assert done["not_signalled"] == 1
    assert isinstance(done["share_of_warning"], float)
    assert 0 <= done["share_of_warning"] < 1
    actions = store.actions(limit=100)
    ours = [a for a in actions if a.step == "checkpoint-before-interruption"]
    assert len(ours) == 5
    assert all(not a.dry_run for a in ours)
    assert sorted(a.status for a in ours).count(ActionStatus.SUCCEEDED) == 4
    [skipped] = [a for a in ours if a.status is ActionStatus.SKIPPED]
    assert skipped.workload_id == f"process:{NODE}:{silent.pid}"
    assert "no checkpoint signal" in skipped.detail
    assert len([n for n in notifier.sent if n.dedup_key.startswith("checkpoint-before-interruption")]) == 5

    # Ticks until the deadline signal nobody twice.
    clock.advance(10)
    steward.tick()
    assert [len(_saved(b)) for _, b in trainers] == [1, 1, 1, 1]
    assert len(_events(store, "interruption.checkpoints")) == 1
    counts = InterruptionRecord(store).counts()
    assert sum(e["interrupted"] for e in counts.values()) == 5
    assert sum(e["checkpointed"] for e in counts.values()) == 4


def test_act_notify_tells_owners_and_signals_nothing(
    make_steward: MakeSteward, children: Children, md: MetadataEmulator
) -> None:
    _, base = children.start("GPU-0")
    steward, store, notifier, _ = make_steward(
        cloud={
            "provider": "aws",
            "interruption": {"metadata_url": md.url, "act": "notify"},
        }
    )
    md.state.aws_action = {
        "action": "terminate",
        "time": (datetime.now(tz=UTC) + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    steward.tick()
    assert not Path(f"{base}.ckpt").exists()
    [n] = [n for n in notifier.sent if n.dedup_key.startswith("checkpoint-before-interruption")]
    assert "spot interruption" in n.body
    [done] = _events(store, "interruption.checkpoints")
    assert done["signalled"] == 1  # the notice went out (a NOTIFY action succeeded)
    assert [a.level.label for a in store.actions(limit=10)] == ["L1"]


def test_endpoint_down_is_a_clear_line_and_nothing_is_acted_on(
    make_steward: MakeSteward, children: Children, md: MetadataEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    _, base = children.start("GPU-0")
    steward, store, _, _ = make_steward()
    md.state.aws_action = {"action": "terminate", "time": "2099-01-01T00:00:00Z"}
    md.state.status = 503
    with caplog.at_level(logging.WARNING):
        steward.tick()
    assert "interruption watch imds" in caplog.text
    assert "HTTP 503" in caplog.text
    assert not Path(f"{base}.ckpt").exists()
    assert _events(store, "interruption.notice") == []
    assert store.actions(limit=10) == []


def test_a_notice_past_its_deadline_is_not_acted_on(
    make_steward: MakeSteward, children: Children, md: MetadataEmulator
) -> None:
    _, base = children.start("GPU-0")
    steward, store, _, _ = make_steward()
    md.state.aws_action = {"action": "terminate", "time": "2020-01-01T00:00:00Z"}
    steward.tick()
    assert not Path(f"{base}.ckpt").exists()
    assert len(_events(store, "interruption.stale")) == 1
    assert store.actions(limit=10) == []


def test_the_registry_attaches_the_watch_from_cloud_settings(md: MetadataEmulator) -> None:
    clock = StepClock()
    on = load_settings(
        None,
        source={"name": "prometheus"},
        cloud={"provider": "gcp", "interruption": {"metadata_url": md.url}},
    )
    # A cluster-wide source (no node of its own) and no queue: nothing to watch.
    assert build_integration(on, clock).interruptions is None
    queue = {"provider": "aws", "interruption": {"sqs_queue_url": "http://127.0.0.1:1/q"}}
    watched = build_integration(load_settings(None, source={"name": "prometheus"}, cloud=queue), clock)
    assert watched.interruptions is not None
    off: Integration = build_integration(load_settings(None, source={"name": "prometheus"}), clock)
    assert off.interruptions is None


def test_a_checkpoint_a_crash_left_unfinished_is_never_resumed_as_a_stop(
    make_steward: MakeSteward, children: Children
) -> None:
    child, base = children.start("GPU-0")
    steward, store, _, clock = make_steward(mode="enforce")
    wid = f"process:{NODE}:{child.pid}"
    left = Decision(
        wid, clock.now(), Level.GRACEFUL_STOP, INTERRUPTION_CHECKPOINT_STEP, "spot", idempotency_key="k"
    )
    action = store.plan_action(left, dry_run=False, at=clock.now())
    assert action is not None
    store.start_action(action.id, clock.now())  # the agent died here
    steward.tick()
    [settled] = store.actions(limit=10)
    assert settled.status is ActionStatus.SKIPPED
    assert settled.detail == "interrupted by a restart; not repeated"
    assert child.poll() is None
    assert not Path(f"{base}.ckpt").exists()
