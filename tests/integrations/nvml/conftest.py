"""Real nvidia-smi captures replayed by the fake NVML library, and recorded /proc trees."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpusteward.integrations.nvml.captures import node_from_capture, parse_smi_xml
from gpusteward.integrations.nvml.fake import FakeNode
from gpusteward.store.db import StateStore

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES = sorted((FIXTURES / "nvml" / "captures").glob("*.txt"))
XMLS = sorted((FIXTURES / "nvml" / "xml").glob("*.xml"))
CGROUPS = FIXTURES / "cgroup"
BTIME = 1_750_000_000
CLK_TCK = 100


def capture(name: str, phase: str) -> FakeNode:
    path = FIXTURES / "nvml" / "captures" / f"{name}.txt"
    return node_from_capture(path.read_text(), phase)


def xml(name: str) -> FakeNode:
    return parse_smi_xml((FIXTURES / "nvml" / "xml" / f"{name}.xml").read_text())


@dataclass
class FakePid:
    """One process as a recorded /proc/<pid> directory."""

    comm: str = "python"
    uid: int = 1000
    start_ticks: int = 500_000
    utime: int = 100
    stime: int = 10
    state: str = "S"
    ppid: int = 1
    cmdline: tuple[str, ...] = ("python", "train.py")
    cgroup: str = "0::/user.slice/user-1000.slice/session-3.scope\n"
    write_bytes: int | None = 0
    env: dict[str, str] = field(default_factory=dict)


def write_proc(root: Path, pids: dict[int, FakePid]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\nprocesses 42\n")
    for pid, p in pids.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(
            f"{pid} ({p.comm}) {p.state} {p.ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 "
            f"{p.utime} {p.stime} 0 0 20 0 4 0 {p.start_ticks} 1000000 100 18446744073709551615\n"
        )
        (d / "status").write_text(f"Name:\t{p.comm}\nUid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in p.cmdline) + b"\0")
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in p.env.items()))
        (d / "cgroup").write_text(p.cgroup)
        if p.write_bytes is not None:
            (d / "io").write_text(f"rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: {p.write_bytes}\n")
    return root


@pytest.fixture
def proc_root(tmp_path: Path) -> Callable[[dict[int, FakePid]], Path]:
    return lambda pids: write_proc(tmp_path / "proc", pids)


def users(uid: int) -> str:
    return {0: "root", 1000: "alice", 1001: "bob"}.get(uid, str(uid))


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    """A fresh SQLite state file."""
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s
