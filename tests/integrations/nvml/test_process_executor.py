"""The local process executor on real child processes.

The GPU side is the capture-replaying fake NVML library behind the real choke point: a
child "holds" its GPU until it has exited (a zombie no longer holds anything), as a CUDA
process's memory is freed by the driver when it dies.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import ActionStatus, Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.executor import CHECKPOINT_SIGNAL_KEY, ProcessExecutor, parse_signal
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.integrations.nvml.procfs import ProcInfo, ProcReader
from gpusteward.integrations.nvml.sampler import NvmlSampler
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import CHECKPOINT_SIGNAL_KEY as SOURCE_KEY
from gpusteward.integrations.nvml.source import NvmlSource
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.followup import follow_up
from gpusteward.runtime.reconcile import Reconciler
from gpusteward.runtime.runner import ActionRunner
from gpusteward.store.db import StateStore

GPU = "GPU-5f2c1a9e-0000-4000-8000-000000000001"
ME = pwd.getpwuid(os.getuid()).pw_name

CHECKPOINTER = """
import os, signal, sys, time
out = sys.argv[1]
def save(signum, frame):
    with open(out + ".ckpt", "w") as f:
        f.write("saved on %d" % signum)
    sys.exit(0)
signal.signal(signal.SIGUSR1, save)
open(out + ".ready", "w").close()
time.sleep(120)
"""

SLOW_SAVER = """
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *a: open(sys.argv[1] + ".ckpt", "a").write("x"))
signal.signal(signal.SIGTERM, lambda *a: (open(sys.argv[1] + ".term", "w").close(), sys.exit(3)))
open(sys.argv[1] + ".ready", "w").close()
time.sleep(120)
"""

STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, lambda *a: open(sys.argv[1] + ".ckpt", "w").close())
open(sys.argv[1] + ".ready", "w").close()
time.sleep(120)
"""


class Node:
    """A fake GPU whose process list is the test's live children."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.procs = ProcReader()

    def __call__(self) -> FakeNode:
        alive = []
        for pid in self.pids:
            info = self.procs.read(pid)
            if info is not None and not info.exited:
                alive.append(FakeProcess(pid, 20_000))
        return FakeNode(
            [FakeGpu(GPU, "NVIDIA H100 80GB HBM3", 81559, 20_000, 0, 0, 120, 35, processes=alive)]
        )


Spawn = Callable[..., tuple[subprocess.Popen[bytes], Path]]


@pytest.fixture
def node() -> Node:
    return Node()


@pytest.fixture
def spawn(node: Node, tmp_path: Path) -> Iterator[Spawn]:
    children: list[subprocess.Popen[bytes]] = []

    def start(script: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
        base = tmp_path / f"child{len(children)}"
        child = subprocess.Popen([sys.executable, "-c", script, str(base)], env={**os.environ, **(env or {})})
        children.append(child)
        node.pids.append(child.pid)
        ready = Path(f"{base}.ready")
        for _ in range(1200):  # hang guard
            if ready.exists():
                break
            time.sleep(0.05)
        assert ready.exists(), "child never became ready"
        return child, base

    yield start
    for c in children:
        if c.poll() is None:
            c.kill()
        c.wait(timeout=10)


def nvml_for(node: Node) -> Nvml:
    nvml = Nvml(FakeNvmlLib(node))
    nvml.start()
    return nvml


def executor(node: Node, **kw: object) -> ProcessExecutor:
    args: dict[str, object] = {
        "node": "n1",
        "procs": ProcReader(),
        "holdings": NvmlSampler(nvml_for(node)).holdings,
        "grace_s": 20.0,
        "term_wait_s": 20.0,
        "kill_wait_s": 20.0,
        "poll_s": 0.05,
        "allow_root": True,
    }
    args.update(kw)
    return ProcessExecutor(**args)  # type: ignore[arg-type]


def workload_of(pid: int, **annotations: str) -> Workload:
    info = ProcReader().read(pid)
    assert info is not None
    return Workload(
        id=f"process:n1:{pid}",
        kind=WorkloadKind.PROCESS,
        name="python",
        owner=Owner(info.user),
        gpus_requested=1,
        gpu_uuids=(GPU,),
        started_at=info.started_at,
        source="nvml",
        annotations=annotations,
        ref={"pid": str(pid), "start_ticks": str(info.start_ticks), "node": "n1"},
    )


def decision(w: Workload, level: Level = Level.GRACEFUL_STOP) -> Decision:
    step = "graceful-stop" if level is Level.GRACEFUL_STOP else "force"
    return Decision(
        w.id,
        datetime.now(tz=UTC),
        level,
        step,
        "zombie for 45 min",
        rule="zombie",
        gpu_uuids=(GPU,),
        idempotency_key=f"{w.id}:{w.incarnation}:{step}",
    )


def test_checkpoint_signal_then_the_process_exits_and_the_gpu_is_released(spawn: Spawn, node: Node) -> None:
    child, base = spawn(CHECKPOINTER)
    ex = executor(node)
    w = workload_of(child.pid, **{CHECKPOINT_SIGNAL_KEY: "SIGUSR1"})
    assert ex.supports(w, Level.GRACEFUL_STOP)
    current = ex.current(w)
    assert current is not None
    assert current.gpu_uuids == (GPU,)
    out = ex.execute(decision(w), w)
    assert Path(f"{base}.ckpt").read_text() == f"saved on {int(signal.SIGUSR1)}"
    assert child.wait(timeout=10) == 0  # it exited by itself: no SIGTERM was needed
    assert out.ok
    assert out.verified
    assert out.released_gpu_uuids == (GPU,)
    assert "SIGUSR1" in out.detail
    assert "SIGTERM" not in out.detail
    assert ex.verify(decision(w), w)
    assert ex.current(w) is None


def test_a_process_that_ignores_sigterm_is_killed_at_l3(spawn: Spawn, node: Node) -> None:
    child, base = spawn(STUBBORN)
    ex = executor(node, grace_s=0.5, term_wait_s=0.5)
    w = workload_of(child.pid, **{CHECKPOINT_SIGNAL_KEY: "USR1"})
    out = ex.execute(decision(w), w)
    assert Path(f"{base}.ckpt").exists()  # the checkpoint signal came first
    assert out.ok
    assert not out.verified
    assert "still running" in out.detail
    assert "SIGTERM after 0.5s" in out.detail
    assert child.poll() is None
    assert not ex.verify(decision(w), w)
    out = ex.execute(decision(w, Level.FORCE), w)
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert out.verified
    assert "SIGKILL" in out.detail


def test_a_reused_pid_is_refused(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(STUBBORN)
    ex = executor(node)
    w = workload_of(child.pid)
    # The finding saw another process under this PID: one that started a tick earlier.
    old = replace(w, ref={**w.ref, "start_ticks": str(int(w.ref["start_ticks"]) - 1)})
    with pytest.raises(PreflightFailed, match="reused"):
        ex.execute(decision(old, Level.FORCE), old)
    assert child.poll() is None
    now = ex.current(old)
    assert now is not None
    assert now.ref["start_ticks"] == w.ref["start_ticks"]


def test_the_runner_skips_a_reused_pid_at_preflight(spawn: Spawn, node: Node, tmp_path: Path) -> None:
    child, _ = spawn(STUBBORN)
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_schema()
    runner = ActionRunner(store, [executor(node)], MemoryNotifier(), SystemClock(), dry_run=False)
    w = workload_of(child.pid)
    old = replace(w, started_at=w.started_at - timedelta(hours=3), ref={**w.ref, "start_ticks": "1"})
    (result,) = runner.run([decision(old, Level.FORCE)], {old.id: old})
    assert result.status is ActionStatus.SKIPPED
    assert "different incarnation" in result.detail
    assert child.poll() is None


@pytest.mark.parametrize("who", ["init", "self", "parent"])
def test_never_init_the_agent_or_its_parents(who: str, node: Node) -> None:
    pid = {"init": 1, "self": os.getpid(), "parent": os.getppid()}[who]
    info = ProcReader().read(pid)
    assert info is not None
    w = Workload(
        f"process:n1:{pid}",
        WorkloadKind.PROCESS,
        "x",
        Owner(info.user),
        1,
        (GPU,),
        info.started_at,
        ref={"pid": str(pid), "start_ticks": str(info.start_ticks), "node": "n1"},
    )
    with pytest.raises(PreflightFailed, match="refused"):
        executor(node).execute(decision(w, Level.FORCE), w)


class AsRoot:
    """The real /proc, except that every process appears to belong to root."""

    def __init__(self) -> None:
        self.real = ProcReader()

    def read(self, pid: int) -> ProcInfo | None:
        info = self.real.read(pid)
        return None if info is None else replace(info, uid=0, user="root")


def test_root_processes_are_refused_unless_allowed(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(STUBBORN)
    w = workload_of(child.pid)
    with pytest.raises(PreflightFailed, match="belongs to root"):
        executor(node, procs=AsRoot(), allow_root=False).execute(decision(w, Level.FORCE), w)
    assert child.poll() is None
    executor(node, procs=AsRoot(), allow_root=True).execute(decision(w, Level.FORCE), w)
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_protected_users_are_refused(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(STUBBORN)
    w = workload_of(child.pid)
    with pytest.raises(PreflightFailed, match=f"protected user {ME}"):
        executor(node, protected_users=[ME]).execute(decision(w, Level.FORCE), w)
    assert child.poll() is None


def test_the_checkpoint_signal_can_come_from_the_process_environment(spawn: Spawn, node: Node) -> None:
    child, base = spawn(
        CHECKPOINTER, env={"GPUSTEWARD_CHECKPOINT_SIGNAL": "10" if signal.SIGUSR1 == 10 else "USR1"}
    )
    w = workload_of(child.pid)
    out = executor(node).execute(decision(w), w)
    assert Path(f"{base}.ckpt").exists()
    assert out.verified


def test_an_invalid_checkpoint_signal_fails_without_touching_the_process(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(STUBBORN)
    w = workload_of(child.pid, **{CHECKPOINT_SIGNAL_KEY: "SIGCHECKPOINT"})
    with pytest.raises(ExecutionError, match="not a signal"):
        executor(node).execute(decision(w), w)
    assert child.poll() is None


def test_without_a_checkpoint_signal_l2_is_sigterm(spawn: Spawn, node: Node) -> None:
    child, base = spawn(CHECKPOINTER)
    w = workload_of(child.pid)
    out = executor(node).execute(decision(w), w)
    assert child.wait(timeout=10) == -signal.SIGTERM
    assert not Path(f"{base}.ckpt").exists()
    assert out.verified
    assert out.detail.startswith("SIGTERM sent")


def test_an_exited_process_is_already_gone(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(STUBBORN)
    w = workload_of(child.pid)
    child.kill()
    child.wait(timeout=10)
    out = executor(node).execute(decision(w, Level.FORCE), w)
    assert out.verified
    assert "already exited" in out.detail


def test_nothing_is_verified_when_nvml_cannot_list_the_processes(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(STUBBORN)
    w = workload_of(child.pid)
    blind = Nvml(FakeNvmlLib(node, missing={"nvmlDeviceGetComputeRunningProcesses"}))
    blind.start()
    ex = executor(node, holdings=NvmlSampler(blind).holdings, kill_wait_s=0.5)
    assert NvmlSampler(blind).holdings() is None
    with pytest.raises(PreflightFailed, match="cannot be confirmed"):
        ex.current(w)
    out = ex.execute(decision(w, Level.FORCE), w)
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert not out.verified  # the process died, but that its GPU memory was freed is not known
    assert "not readable from NVML" in out.detail


def test_supports_only_this_nodes_processes_with_a_known_start(node: Node) -> None:
    ex = executor(node)
    w = workload_of(os.getpid())
    assert ex.supports(w, Level.FORCE)
    assert not ex.supports(w, Level.NOTIFY)
    assert not ex.supports(w, Level.INFRA)
    assert not ex.supports(replace(w, ref={**w.ref, "node": "n2"}), Level.FORCE)
    assert not ex.supports(replace(w, ref={"pid": "5", "node": "n1"}), Level.FORCE)
    assert not ex.supports(replace(w, kind=WorkloadKind.POD), Level.FORCE)


def test_source_and_executor_agree_on_the_checkpoint_key() -> None:
    assert CHECKPOINT_SIGNAL_KEY == SOURCE_KEY


@pytest.mark.parametrize(
    ("text", "sig"), [("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2), ("15", signal.SIGTERM)]
)
def test_parse_signal(text: str, sig: signal.Signals) -> None:
    assert parse_signal(text) is sig


def test_the_nvml_source_and_the_runner_stop_a_real_process_end_to_end(
    spawn: Spawn, node: Node, tmp_path: Path
) -> None:
    child, base = spawn(CHECKPOINTER, env={"GPUSTEWARD_CHECKPOINT_SIGNAL": "SIGUSR1"})
    nvml = Nvml(FakeNvmlLib(node))
    source = NvmlSource(nvml, NvmlSourceSettings(node="n1"))
    (w,) = source.observe(datetime.now(tz=UTC)).workloads
    ex = executor(node, holdings=source.sampler.holdings)
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_schema()
    notifier = MemoryNotifier()
    runner = ActionRunner(store, [ex], notifier, SystemClock(), dry_run=False)
    (result,) = runner.run([decision(w)], {w.id: w})
    assert result.status is ActionStatus.EXECUTING, result.detail  # begun; completed when due
    assert child.wait(timeout=10) == 0  # it saved and exited within its grace
    assert Path(f"{base}.ckpt").exists()
    (done,) = follow_up(runner, datetime.now(tz=UTC) + timedelta(seconds=ex.grace_s), {w.id: w})
    assert done.status is ActionStatus.SUCCEEDED, done.detail
    assert "(verified)" in done.detail
    assert notifier.sent  # the owner was told before the stop
    assert source.observe(datetime.now(tz=UTC)).workloads == ()


# --- two-phase L2: the grace never blocks a tick ------------------------------------------------


class CountingClock(SystemClock):
    """The real clock, counting the executor's waits: ``begin`` must not wait at all."""

    def __init__(self) -> None:
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        super().sleep(seconds)


def _until(cond: Callable[[], bool]) -> None:
    for _ in range(1200):  # a hang guard, not a timing assertion
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition never came true")


def test_begin_sends_only_the_checkpoint_signal_and_complete_sends_sigterm(spawn: Spawn, node: Node) -> None:
    child, base = spawn(SLOW_SAVER)
    clock = CountingClock()
    ex = executor(node, clock=clock, grace_s=120.0)
    w = workload_of(child.pid, **{CHECKPOINT_SIGNAL_KEY: "USR1"})
    out = ex.begin(decision(w), w)
    assert (out.ok, out.verified, out.follow_up_after_s) == (True, False, 120.0)
    assert clock.sleeps == 0  # returned at once: no wait for the grace
    # Written, not just created: a SIGTERM between the handler's open and its write would run the
    # SIGTERM handler inside it and exit before the write.
    _until(lambda: Path(f"{base}.ckpt").exists() and Path(f"{base}.ckpt").read_text() == "x")
    assert child.poll() is None
    assert not Path(f"{base}.term").exists()
    out = ex.complete(decision(w), w)
    assert child.wait(timeout=10) == 3  # it got SIGTERM (and exits 3 on it)
    assert Path(f"{base}.term").exists()
    assert out.verified
    assert "SIGTERM sent" in out.detail
    assert Path(f"{base}.ckpt").read_text() == "x"  # one checkpoint signal


def test_complete_after_the_process_saved_and_exited_sends_nothing(spawn: Spawn, node: Node) -> None:
    child, _ = spawn(CHECKPOINTER)
    ex = executor(node)
    w = workload_of(child.pid, **{CHECKPOINT_SIGNAL_KEY: "USR1"})
    assert ex.begin(decision(w), w).follow_up_after_s == ex.grace_s
    assert child.wait(timeout=10) == 0  # exited by itself on the checkpoint signal
    out = ex.complete(decision(w), w)
    assert out.verified
    assert "exited within the grace" in out.detail
    assert "SIGTERM" not in out.detail


def _stops(
    spawn: Spawn, node: Node, n: int
) -> tuple[list[subprocess.Popen[bytes]], list[Path], list[Workload]]:
    made = [spawn(SLOW_SAVER) for _ in range(n)]
    ws = [workload_of(c.pid, **{CHECKPOINT_SIGNAL_KEY: "USR1"}) for c, _ in made]
    return [c for c, _ in made], [b for _, b in made], ws


def test_a_tick_with_three_stops_does_not_wait_for_their_grace_and_completes_each_once(
    spawn: Spawn, node: Node, tmp_path: Path
) -> None:
    children, bases, ws = _stops(spawn, node, 3)
    clock = CountingClock()
    ex = executor(node, clock=clock, grace_s=120.0, term_wait_s=10.0)
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_schema()
    runner = ActionRunner(store, [ex], MemoryNotifier(), SystemClock(), dry_run=False)
    by_id = {w.id: w for w in ws}
    t0 = datetime.now(tz=UTC)
    results = runner.run([decision(w) for w in ws], by_id)
    assert [r.status for r in results] == [ActionStatus.EXECUTING] * 3
    assert clock.sleeps == 0  # the tick waited for no grace
    for child, base in zip(children, bases, strict=True):
        _until(lambda b=base: Path(f"{b}.ckpt").exists())  # type: ignore[misc]
        assert child.poll() is None
        assert not Path(f"{base}.term").exists()
    rows = store.actions()
    assert {a.status for a in rows} == {ActionStatus.EXECUTING}
    assert all(a.due_at is not None and a.due_at >= t0 + timedelta(seconds=120) for a in rows)
    # Pending by design: not a crash leftover for reconciliation.
    assert Reconciler(runner).unfinished() == []
    # Not due yet: nothing happens; the same decisions again run nothing twice.
    assert follow_up(runner, t0 + timedelta(seconds=60), by_id) == []
    assert runner.run([decision(w) for w in ws], by_id) == []
    done = follow_up(runner, t0 + timedelta(seconds=121), by_id)
    assert [r.status for r in done] == [ActionStatus.SUCCEEDED] * 3
    assert all("(verified)" in r.detail for r in done)
    assert [c.wait(timeout=10) for c in children] == [3, 3, 3]  # each got its SIGTERM
    assert all(Path(f"{b}.ckpt").read_text() == "x" for b in bases)  # one checkpoint signal each
    assert follow_up(runner, t0 + timedelta(seconds=600), by_id) == []  # never twice
    for w in ws:
        trail = [r.event for r in store.audit_log(workload_id=w.id) if r.event.startswith("action.")]
        assert trail == ["action.start", "action.pending", "action.succeeded"]
    assert all(a.attempts == 1 for a in store.actions())


def test_a_restarted_agent_completes_a_pending_stop_once(spawn: Spawn, node: Node, tmp_path: Path) -> None:
    children, bases, ws = _stops(spawn, node, 1)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = StateStore(url)
    store.create_schema()
    runner = ActionRunner(store, [executor(node)], MemoryNotifier(), SystemClock(), dry_run=False)
    (begun,) = runner.run([decision(ws[0])], {ws[0].id: ws[0]})
    assert begun.status is ActionStatus.EXECUTING
    store.close()  # the agent goes away with its stop pending

    store = StateStore(url)
    again = ActionRunner(store, [executor(node)], MemoryNotifier(), SystemClock(), dry_run=False)
    assert Reconciler(again).unfinished() == []  # not re-run from scratch
    due = datetime.now(tz=UTC) + timedelta(seconds=21)
    (done,) = follow_up(again, due, {ws[0].id: ws[0]})
    assert done.status is ActionStatus.SUCCEEDED
    assert done.action_id == begun.action_id
    assert children[0].wait(timeout=10) == 3
    assert follow_up(again, due, {ws[0].id: ws[0]}) == []
    assert Path(f"{bases[0]}.ckpt").read_text() == "x"
    store.close()


def test_a_pending_stop_whose_workload_is_gone_is_settled_without_signals(
    spawn: Spawn, node: Node, tmp_path: Path
) -> None:
    children, _, ws = _stops(spawn, node, 1)
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_schema()
    runner = ActionRunner(store, [executor(node)], MemoryNotifier(), SystemClock(), dry_run=False)
    runner.run([decision(ws[0])], {ws[0].id: ws[0]})
    children[0].kill()
    children[0].wait(timeout=10)
    (done,) = follow_up(runner, datetime.now(tz=UTC) + timedelta(seconds=21), {})
    assert done.status is ActionStatus.SUCCEEDED
    assert "gone" in done.detail
