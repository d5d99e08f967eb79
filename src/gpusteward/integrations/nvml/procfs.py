"""Who a PID is: owner, command, start time, CPU and I/O counters, container, pod, Slurm job.

Pure ``parse_*`` functions take the text of one ``/proc`` file; ``ProcReader`` is the thin
runner that reads them under a root given as a parameter (``/proc`` by default, a host's
``/proc`` mounted elsewhere in a container, or a directory of recorded files in tests).
A file that cannot be read (the process exited, or belongs to another user and the agent
is not root) leaves its fields unknown; it never fails the read of the others.
"""

from __future__ import annotations

import os
import pwd
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from gpusteward.integrations.nvml.cgroup import CgroupInfo, parse_cgroup

_T = TypeVar("_T")

#: Environment variables read from a GPU process (``/proc/<pid>/environ``); the rest is dropped.
ENV_KEYS = frozenset(
    {
        "GPUSTEWARD_CHECKPOINT_SIGNAL",
        "GPUSTEWARD_PROTECT",
        "GPUSTEWARD_EXCLUDE_UNTIL",
        "GPUSTEWARD_TEAM",
        "SLURM_JOB_ID",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_NAME",
        "POD_NAME",
        "POD_NAMESPACE",
        "KUBERNETES_SERVICE_HOST",
        "HOSTNAME",
        "CUDA_VISIBLE_DEVICES",
    }
)
# Where a pod's service-account namespace is mounted, seen through /proc/<pid>/root.
_SA_NAMESPACE = "root/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True, slots=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` gpusteward uses."""

    comm: str
    state: str
    ppid: int
    utime_ticks: int
    stime_ticks: int
    #: Clock ticks after boot when the process started: with the PID, its identity.
    start_ticks: int


def parse_stat(text: str) -> Stat:
    """``/proc/<pid>/stat``. The command may hold spaces and parentheses: it ends at the last ``)``."""
    lpar, rpar = text.index("("), text.rindex(")")
    rest = text[rpar + 2 :].split()
    # rest[0] is field 3 (state); utime is field 14, stime 15, starttime 22.
    return Stat(
        comm=text[lpar + 1 : rpar],
        state=rest[0],
        ppid=int(rest[1]),
        utime_ticks=int(rest[11]),
        stime_ticks=int(rest[12]),
        start_ticks=int(rest[19]),
    )


def parse_status_uid(text: str) -> int | None:
    """The real UID from ``/proc/<pid>/status``."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def parse_io(text: str) -> tuple[int | None, int | None]:
    """(read_bytes, write_bytes) from ``/proc/<pid>/io``: bytes that reached the storage layer."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            values[key.strip()] = int(value)
    return values.get("read_bytes"), values.get("write_bytes")


def parse_cmdline(data: bytes) -> tuple[str, ...]:
    return tuple(a.decode("utf-8", "replace") for a in data.split(b"\0") if a)


def parse_environ(data: bytes, keys: frozenset[str] = ENV_KEYS) -> dict[str, str]:
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode("utf-8", "replace")
        if sep and name in keys:
            out[name] = value.decode("utf-8", "replace")
    return out


def parse_btime(text: str) -> int:
    """Boot time (epoch seconds) from ``/proc/stat``."""
    for line in text.splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    raise ValueError("no btime line in /proc/stat")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)  # a UID from a container's own /etc/passwd: the number is all we know


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """One process, as ``/proc`` showed it at one read."""

    pid: int
    uid: int | None
    user: str
    comm: str
    state: str
    ppid: int
    cmdline: tuple[str, ...]
    start_ticks: int
    started_at: datetime
    cpu_seconds: float
    read_bytes: int | None
    write_bytes: int | None
    cgroup: CgroupInfo
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: The pod's namespace from its mounted service account, when the process runs in one.
    namespace: str = ""

    @property
    def exited(self) -> bool:
        """A zombie (Z) or dead (X) task: it holds nothing any more, it waits to be reaped."""
        return self.state in ("Z", "X")

    @property
    def command(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def slurm_job(self) -> str:
        return self.cgroup.slurm_job or self.env.get("SLURM_JOB_ID", "")

    @property
    def pod_namespace(self) -> str:
        return self.env.get("POD_NAMESPACE") or self.namespace

    @property
    def pod_name(self) -> str:
        if not self.cgroup.pod_uid:
            return ""
        # A pod's containers get the pod name as their hostname.
        return self.env.get("POD_NAME") or self.env.get("HOSTNAME", "")


@dataclass(frozen=True, slots=True)
class _Static:
    cmdline: tuple[str, ...]
    env: Mapping[str, str]
    cgroup: CgroupInfo
    namespace: str


class ProcReader:
    """Reads ``ProcInfo`` under ``root``. ``users`` maps a UID to a name (default: the passwd database)."""

    def __init__(
        self,
        root: str | Path = "/proc",
        *,
        users: Callable[[int], str] = _user_name,
        clock_ticks: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self.cache_size = cache_size
        self._static: OrderedDict[tuple[int, int], _Static] = OrderedDict()
        self._lock = threading.Lock()
        self._users = users
        self._user_cache: dict[int, str] = {}
        self.clock_ticks = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._btime: int | None = None

    @property
    def boot_time(self) -> int:
        if self._btime is None:
            self._btime = parse_btime((self.root / "stat").read_text())
        return self._btime

    def started_at(self, start_ticks: int) -> datetime:
        # Whole ticks from a whole-second boot time: the same process always gives the same time.
        return datetime.fromtimestamp(self.boot_time, tz=UTC) + timedelta(
            seconds=start_ticks / self.clock_ticks
        )

    def stat(self, pid: int) -> Stat | None:
        """Just the stat line: the cheap identity check (start time, state)."""
        try:
            return parse_stat(_text(f"{self._root}/{pid}/stat"))
        except (OSError, ValueError, IndexError):
            return None

    def user(self, uid: int) -> str:
        name = self._user_cache.get(uid)
        if name is None:
            name = self._user_cache[uid] = self._users(uid)
        return name

    def _static_of(self, pid: int, start_ticks: int) -> _Static:
        """Command line, environment, cgroup and namespace: read once per process (PID + start)."""
        key = (pid, start_ticks)
        with self._lock:
            hit = self._static.get(key)
            if hit is not None:
                self._static.move_to_end(key)
                return hit
        base = f"{self._root}/{pid}"
        env = _read_bytes(f"{base}/environ", parse_environ) or {}
        cgroup = _read(f"{base}/cgroup", parse_cgroup) or CgroupInfo(path="")
        namespace = ""
        if cgroup.pod_uid and "POD_NAMESPACE" not in env:
            namespace = _read(f"{base}/{_SA_NAMESPACE}", str.strip) or ""
        static = _Static(
            _read_bytes(f"{base}/cmdline", parse_cmdline) or (), MappingProxyType(env), cgroup, namespace
        )
        with self._lock:
            self._static[key] = static
            while len(self._static) > self.cache_size:
                self._static.popitem(last=False)
        return static

    def read(self, pid: int) -> ProcInfo | None:
        """Everything about ``pid``; None when it does not exist (any more).

        stat, status (the UID: a setuid exec changes it) and io are read every time; the
        rest is fixed at exec in practice and is read once per process incarnation.
        """
        base = f"{self._root}/{pid}"
        st = self.stat(pid)
        if st is None:
            return None
        uid = _read(f"{base}/status", parse_status_uid)
        read_b, write_b = _read(f"{base}/io", parse_io) or (None, None)
        static = self._static_of(pid, st.start_ticks)
        return ProcInfo(
            pid=pid,
            uid=uid,
            user=self.user(uid) if uid is not None else "",
            comm=st.comm,
            state=st.state,
            ppid=st.ppid,
            cmdline=static.cmdline,
            start_ticks=st.start_ticks,
            started_at=self.started_at(st.start_ticks),
            cpu_seconds=(st.utime_ticks + st.stime_ticks) / self.clock_ticks,
            read_bytes=read_b,
            write_bytes=write_b,
            cgroup=static.cgroup,
            env=static.env,
            namespace=static.namespace,
        )


# Paths are plain strings and files are read with os.open/os.read: a pathlib join costs
# microseconds, and a buffered text file object four times what the read itself does, while a
# node agent reads three files of every GPU process on every pass (the source and the exporter
# both: 1,500 reads at 8 GPUs x 32 processes).


def _raw(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):  # /proc hands a large file over in several reads
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _text(path: str) -> str:
    return _raw(path).decode()


def _read(path: str, parse: Callable[[str], _T]) -> _T | None:
    try:
        return parse(_text(path))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _read_bytes(path: str, parse: Callable[[bytes], _T]) -> _T | None:
    try:
        return parse(_raw(path))
    except OSError:
        return None
