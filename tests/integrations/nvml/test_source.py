"""The nvml source: attribution from /proc, rates between observations, MIG, lost GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import EXCLUDE_UNTIL_KEY, PROTECT_KEY, WorkloadKind
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import CHECKPOINT_SIGNAL_KEY, NvmlSource

from .conftest import BTIME, CGROUPS, FakePid, capture, users, write_proc

NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)
H100_LOAD = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01"


def source_for(node: FakeNode | Callable[[], FakeNode], root: Path, **settings: object) -> NvmlSource:
    return NvmlSource(
        Nvml(FakeNvmlLib(node)),
        NvmlSourceSettings(node="n1", **settings),  # type: ignore[arg-type]
        procs=ProcReader(root, users=users, clock_ticks=100),
    )


def test_processes_are_attributed_from_proc(proc_root: Callable[[dict[int, FakePid]], Path]) -> None:
    root = proc_root(
        {
            11327: FakePid(
                comm="memhog",
                uid=1000,
                start_ticks=123_456,
                cgroup=(CGROUPS / "slurm-v1-task.cgroup").read_text(),
                env={"SLURM_JOB_ACCOUNT": "vision"},
            ),
            11328: FakePid(
                comm="memhog",
                uid=1001,
                cgroup=(CGROUPS / "k8s-containerd-v2-burstable.cgroup").read_text(),
                env={
                    "POD_NAMESPACE": "research",
                    "HOSTNAME": "trainer-0",
                    "GPUSTEWARD_CHECKPOINT_SIGNAL": "SIGUSR1",
                },
            ),
            11345: FakePid(
                comm="gpu_burn", uid=0, cmdline=("./gpu_burn", "60"), env={"GPUSTEWARD_PROTECT": "true"}
            ),
        }
    )
    obs = source_for(capture(H100_LOAD, "load"), root, teams={"bob": "platform"}).observe(NOW)
    by_pid = {w.ref["pid"]: w for w in obs.workloads}
    slurm, pod, burn = by_pid["11327"], by_pid["11328"], by_pid["11345"]
    assert slurm.kind is WorkloadKind.PROCESS
    assert slurm.owner.user == "alice"
    assert slurm.owner.team == "vision"  # the Slurm account
    assert slurm.labels["gpusteward.io/slurm-job"] == "4242"
    # The start time comes from the stat file's clock ticks after boot.
    assert slurm.started_at == datetime.fromtimestamp(BTIME + 1234.56, tz=UTC)
    assert slurm.ref == {"pid": "11327", "node": "n1", "start_ticks": "123456", "uid": "1000"}
    assert pod.owner.user == "bob"
    assert pod.owner.team == "platform"  # the configured mapping wins over the namespace
    assert pod.labels["gpusteward.io/pod"] == "trainer-0"
    assert pod.labels["gpusteward.io/namespace"] == "research"
    assert pod.labels["gpusteward.io/pod-uid"] == "6e7520b1-f6e3-45bd-8673-1d64d102fedf"
    assert pod.labels["gpusteward.io/qos"] == "burstable"
    assert pod.labels["gpusteward.io/runtime"] == "containerd"
    assert len(pod.labels["gpusteward.io/container-id"]) == 64
    assert pod.annotations[CHECKPOINT_SIGNAL_KEY] == "SIGUSR1"
    assert burn.owner.user == "root"
    assert burn.owner.team == ""
    assert burn.name == "./gpu_burn 60"
    assert burn.annotations[PROTECT_KEY] == "true"
    assert obs.errors == ()


def test_namespace_from_the_pods_service_account(proc_root: Callable[[dict[int, FakePid]], Path]) -> None:
    root = proc_root({11327: FakePid(cgroup=(CGROUPS / "k8s-crio-v2-besteffort.cgroup").read_text())})
    sa = root / "11327" / "root" / "var" / "run" / "secrets" / "kubernetes.io" / "serviceaccount"
    sa.mkdir(parents=True)
    (sa / "namespace").write_text("ml-team\n")
    node = capture(H100_LOAD, "load")
    node.gpus[0].processes = node.gpus[0].processes[:1]
    (w,) = source_for(node, root).observe(NOW).workloads
    assert w.owner.team == "ml-team"
    assert w.labels["gpusteward.io/runtime"] == "cri-o"


def test_cpu_use_and_write_rates_come_from_two_observations(
    proc_root: Callable[[dict[int, FakePid]], Path],
) -> None:
    pids = {
        11327: FakePid(utime=100, stime=0, write_bytes=0),
        11328: FakePid(),
        11345: FakePid(utime=0, stime=0),
    }
    root = proc_root(pids)
    src = source_for(
        capture(H100_LOAD, "load"), root, write_burst_bytes_per_second=1e6, checkpoint_exclude_minutes=5
    )
    first = src.observe(NOW)
    assert first.samples[0].proc_cpu_pct is None  # one reading gives no rate
    pids[11327].utime += 1500  # 15 s of CPU in 30 s: 50 % of a core
    pids[11327].write_bytes = 300_000_000  # 10 MB/s: a checkpoint being written
    pids[11345].utime += 3000  # 30 s in 30 s: one busy core
    write_proc(root, pids)
    second = src.observe(NOW + timedelta(seconds=30))
    assert second.samples[0].proc_cpu_pct == pytest.approx(150.0)  # all three processes together
    by_pid = {w.ref["pid"]: w for w in second.workloads}
    until = NOW + timedelta(seconds=30) + timedelta(minutes=5)
    assert by_pid["11327"].annotations[EXCLUDE_UNTIL_KEY] == until.isoformat()
    assert EXCLUDE_UNTIL_KEY not in by_pid["11345"].annotations
    # The exclusion outlives the burst, then ends.
    third = src.observe(NOW + timedelta(minutes=2))
    assert {w.ref["pid"]: w for w in third.workloads}["11327"].annotations[
        EXCLUDE_UNTIL_KEY
    ] == until.isoformat()
    fourth = src.observe(NOW + timedelta(minutes=10))
    assert EXCLUDE_UNTIL_KEY not in {w.ref["pid"]: w for w in fourth.workloads}["11327"].annotations


def test_a_reused_pid_starts_its_rates_afresh(proc_root: Callable[[dict[int, FakePid]], Path]) -> None:
    pids = {11327: FakePid(utime=100), 11328: FakePid(), 11345: FakePid()}
    root = proc_root(pids)
    src = source_for(capture(H100_LOAD, "load"), root)
    src.observe(NOW)
    pids[11327] = FakePid(utime=5, start_ticks=900_000)  # another process under the same PID
    write_proc(root, pids)
    obs = src.observe(NOW + timedelta(seconds=30))
    assert obs.samples[0].proc_cpu_pct is None
    w = next(w for w in obs.workloads if w.ref["pid"] == "11327")
    assert w.ref["start_ticks"] == "900000"


def test_zombie_processes_waiting_to_be_reaped_are_not_workloads(
    proc_root: Callable[[dict[int, FakePid]], Path],
) -> None:
    root = proc_root({11327: FakePid(state="Z"), 11328: FakePid(), 11345: FakePid()})
    obs = source_for(capture(H100_LOAD, "load"), root).observe(NOW)
    assert sorted(w.ref["pid"] for w in obs.workloads) == ["11328", "11345"]


def test_workloads_are_listed_newest_first(proc_root: Callable[[dict[int, FakePid]], Path]) -> None:
    # The window keeps the history of the last holder listed: the oldest process on a shared GPU.
    root = proc_root(
        {11327: FakePid(start_ticks=300), 11328: FakePid(start_ticks=100), 11345: FakePid(start_ticks=200)}
    )
    obs = source_for(capture(H100_LOAD, "load"), root).observe(NOW)
    assert [w.ref["pid"] for w in obs.workloads] == ["11327", "11345", "11328"]


def test_a_lost_gpu_is_listed_without_a_sample(proc_root: Callable[[dict[int, FakePid]], Path]) -> None:
    node = FakeNode(
        [
            FakeGpu(
                "GPU-a",
                "NVIDIA A100-SXM4-80GB",
                81920,
                40000,
                0,
                0,
                90,
                40,
                processes=[FakeProcess(7, 39000)],
            ),
            FakeGpu("GPU-b", "NVIDIA A100-SXM4-80GB", 81920, 10, 0, 0, 60, 35),
        ],
        driver="550.54.15",
    )
    src = source_for(node, proc_root({7: FakePid()}))
    assert len(src.observe(NOW).samples) == 2
    node.gpus[0].lost = True
    obs = src.observe(NOW + timedelta(seconds=30))
    assert [g.uuid for g in obs.gpus] == ["GPU-a", "GPU-b"]
    assert [s.gpu_uuid for s in obs.samples] == ["GPU-b"]
    assert any("GPU 0 unreadable" in e for e in obs.errors)
    node.gpus[1].lost = True
    with pytest.raises(SourceError):
        src.observe(NOW + timedelta(seconds=60))


def test_a_gpu_with_nothing_readable_gets_no_sample(proc_root: Callable[[dict[int, FakePid]], Path]) -> None:
    node = FakeNode([FakeGpu("GPU-a", "Mystery GPU")])
    obs = source_for(node, proc_root({})).observe(NOW)
    assert [g.uuid for g in obs.gpus] == ["GPU-a"]
    assert obs.samples == ()


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_a_real_process_is_attributed_from_the_real_proc(children: list[subprocess.Popen[bytes]]) -> None:
    before = time.time()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--epochs", "3"],
        env={**os.environ, "GPUSTEWARD_CHECKPOINT_SIGNAL": "SIGUSR2", "SLURM_JOB_ID": "77"},
    )
    children.append(child)
    after = time.time()
    node = FakeNode(
        [
            FakeGpu(
                "GPU-real",
                "NVIDIA H100 80GB HBM3",
                81559,
                20000,
                0,
                0,
                100,
                40,
                processes=[FakeProcess(child.pid, 19000)],
            )
        ]
    )
    src = NvmlSource(Nvml(FakeNvmlLib(node)), NvmlSourceSettings(node="n1"))
    (w,) = src.observe(datetime.now(tz=UTC)).workloads
    assert w.owner.user == __import__("pwd").getpwuid(os.getuid()).pw_name
    assert w.name.endswith("--epochs 3")
    assert w.labels["gpusteward.io/slurm-job"] == "77"
    assert w.annotations[CHECKPOINT_SIGNAL_KEY] == "SIGUSR2"
    # /proc's start time has clock-tick resolution, boot time whole seconds.
    assert before - 1.5 <= w.started_at.timestamp() <= after + 1.5
    assert int(w.ref["start_ticks"]) > 0


def test_cpu_of_a_gpu_is_unknown_while_one_holder_is_not_in_proc(
    proc_root: Callable[[dict[int, FakePid]], Path],
) -> None:
    # 11345 is in another PID namespace: a partial sum could make a busy GPU look stalled.
    pids = {11327: FakePid(), 11328: FakePid()}
    root = proc_root(pids)
    src = source_for(capture(H100_LOAD, "load"), root)
    src.observe(NOW)
    pids[11327].utime += 100
    write_proc(root, pids)
    obs = src.observe(NOW + timedelta(seconds=30))
    assert obs.samples[0].proc_cpu_pct is None
    unattributed = next(w for w in obs.workloads if w.ref["pid"] == "11345")
    assert unattributed.owner.user == ""
    assert "start_ticks" not in unattributed.ref  # so no executor will act on it
    assert any("11345" in e for e in obs.errors)
