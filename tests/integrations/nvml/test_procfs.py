"""/proc attribution on real processes started by the test, and the pure parsers."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusteward.integrations.nvml.procfs import (
    ProcReader,
    parse_btime,
    parse_cmdline,
    parse_environ,
    parse_io,
    parse_stat,
    parse_status_uid,
)


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def wait_for(path: Path) -> None:
    for _ in range(600):  # hang guard only
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def fstype(path: Path) -> str:
    """The type of the filesystem ``path`` lives on, from the longest matching mount point."""
    best, kind = "", ""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mount, fs, *_ = line.split()
        if str(path).startswith(mount) and len(mount) > len(best):
            best, kind = mount, fs
    return kind


def test_reads_a_real_child(spawn: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    # Burn some CPU, write 4 MiB to disk with fsync, then wait.
    code = (
        "import os, sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.3: pass\n"
        f"with open({str(tmp_path / 'blob')!r}, 'wb') as f:\n"
        "    f.write(os.urandom(4 << 20)); f.flush(); os.fsync(f.fileno())\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    before = time.time()
    child = subprocess.Popen(
        [sys.executable, "-c", code, "train (v2).py"],
        env={**os.environ, "GPUSTEWARD_CHECKPOINT_SIGNAL": "USR1", "POD_NAMESPACE": "ns1", "SECRET": "x"},
    )
    spawn.append(child)
    wait_for(ready)
    info = ProcReader().read(child.pid)
    assert info is not None
    assert info.pid == child.pid
    assert info.uid == os.getuid()
    assert info.user == pwd.getpwuid(os.getuid()).pw_name
    assert info.ppid == os.getpid()
    assert info.cmdline[-1] == "train (v2).py"
    assert info.cpu_seconds >= 0.2
    assert before - 1.5 <= info.started_at.timestamp() <= time.time() + 1.5
    # Only the variables gpusteward reads are kept.
    assert dict(info.env) == {"GPUSTEWARD_CHECKPOINT_SIGNAL": "USR1", "POD_NAMESPACE": "ns1"}
    assert info.write_bytes is not None  # our own child: /proc/<pid>/io is readable
    if fstype(tmp_path) not in ("tmpfs", "ramfs"):  # memory filesystems never reach the block layer
        assert info.write_bytes >= 4 << 20
    assert not info.exited


def test_a_large_environment_and_command_line_are_read_whole(spawn: list[subprocess.Popen[bytes]]) -> None:
    # Past 64 KiB /proc hands the file over in several reads: the variable after the padding
    # and the last argument are only seen when every one is taken.
    padding = "x" * 100_000  # one argument may hold 128 KiB at most
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", padding, "last-arg"],
        env={"PADDING": padding, "SLURM_JOB_ID": "4242"},
    )
    spawn.append(child)
    deadline = time.monotonic() + 30
    while (info := ProcReader().read(child.pid)) is None or not info.cmdline:
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.02)
    assert info.cmdline[-2:] == (padding, "last-arg")
    assert info.slurm_job == "4242"


def test_a_zombie_is_exited_and_a_reaped_pid_is_gone(spawn: list[subprocess.Popen[bytes]]) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    spawn.append(child)
    reader = ProcReader()
    start = reader.stat(child.pid)
    assert start is not None
    child.send_signal(signal.SIGKILL)
    for _ in range(600):
        st = reader.stat(child.pid)
        if st is not None and st.state == "Z":
            break
        time.sleep(0.05)
    info = reader.read(child.pid)
    assert info is not None
    assert info.exited  # not reaped yet: still in /proc, holding nothing
    assert info.start_ticks == start.start_ticks
    child.wait(timeout=10)
    assert reader.read(child.pid) is None


def test_user_names_are_cached_and_unknown_uids_are_numbers() -> None:
    calls: list[int] = []

    def users(uid: int) -> str:
        calls.append(uid)
        return "x"

    reader = ProcReader(users=users)
    assert reader.user(5) == reader.user(5) == "x"
    assert calls == [5]
    assert ProcReader().user(4_000_000_000 - 7) == str(4_000_000_000 - 7)


def test_parse_stat_with_spaces_and_parentheses_in_the_command() -> None:
    line = "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 1 0 987654 1 1 1\n"
    st = parse_stat(line)
    assert (st.comm, st.state, st.ppid, st.utime_ticks, st.stime_ticks, st.start_ticks) == (
        "my (odd) proc",
        "S",
        1,
        250,
        50,
        987654,
    )


def test_parse_stat_of_this_process_matches_os() -> None:
    st = parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert st.ppid == os.getppid()
    assert st.state in "RS"


def test_small_parsers() -> None:
    assert parse_status_uid("Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t1\n") == 1000
    assert parse_status_uid("Name:\tx\n") is None
    assert parse_io(
        "rchar: 5\nwchar: 6\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n"
    ) == (4096, 8192)
    assert parse_io("") == (None, None)
    assert parse_cmdline(b"python\0train.py\0--lr\x000.1\0") == ("python", "train.py", "--lr", "0.1")
    assert parse_environ(b"SLURM_JOB_ID=12\0PATH=/bin\0BROKEN\0") == {"SLURM_JOB_ID": "12"}
    assert parse_btime("cpu 1 2\nbtime 1700000000\n") == 1700000000
    with pytest.raises(ValueError, match="btime"):
        parse_btime("cpu 1 2\n")


def test_a_missing_pid_is_none(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("btime 1\n")
    assert ProcReader(tmp_path).read(12345) is None


def _fake_pid(root: Path, pid: int, start: int, uid: int, cmd: bytes) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(f"{pid} (x) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 {start} 1 1 1\n")
    (d / "status").write_text(f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cmdline").write_bytes(cmd)


def test_exec_time_facts_are_read_once_per_incarnation_but_the_uid_every_time(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("btime 1700000000\n")
    reader = ProcReader(tmp_path, users=str, clock_ticks=100)
    _fake_pid(tmp_path, 42, 1000, 1000, b"python\0train.py\0")
    first = reader.read(42)
    _fake_pid(tmp_path, 42, 1000, 0, b"renamed\0")  # same process: setuid to root, new title
    second = reader.read(42)
    assert first is not None
    assert second is not None
    assert second.cmdline == first.cmdline == ("python", "train.py")
    assert second.uid == 0  # the guard against root must see the change
    _fake_pid(tmp_path, 42, 2000, 1000, b"other\0")  # the PID reused by another process
    third = reader.read(42)
    assert third is not None
    assert third.cmdline == ("other",)


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("btime 1700000000\n")
    reader = ProcReader(tmp_path, users=str, clock_ticks=100, cache_size=3)
    for pid in range(10, 20):
        _fake_pid(tmp_path, pid, pid, 1000, b"x\0")
        assert reader.read(pid) is not None
    assert len(reader._static) == 3
