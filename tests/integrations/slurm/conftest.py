"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd on 127.0.0.1.

Everything lives in a temporary directory (key, sockets, state, spool, logs) and uses free
ports; the node has four "GPUs" that are plain files (gres.conf ``AutoDetect=off``), which
Slurm registers and allocates by index like real ones. Every Slurm command in the tests is
pointed at it with ``SLURM_CONF``. At the end every job is cancelled and every process this
fixture started (and the job step daemons of its slurmd) is stopped by pid.

Without Slurm installed (or without root, which slurmd needs to run jobs) the tests skip;
under ``CI=true`` they fail instead, since ``.ci/run`` installs ``slurm-wlm`` and ``munge``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from gpusteward.domain.models import Gpu, Observation, Sample

NODE = "gst-node1"
GPUS = 4
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _missing_or_fail(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Slurm test cluster unavailable under CI=true: {why}")
    pytest.skip(f"Slurm test cluster unavailable: {why}")


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    node: str = NODE

    # -- commands -------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{argv} exited {done.returncode}: {done.stderr}{self.logs()}")
        return done

    def sbatch(self, script: str, *options: str) -> str:
        path = self.root / f"job-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/bash\n" + script)
        out = self.run(
            "sbatch",
            "--parsable",
            f"--chdir={self.root}",
            f"--output={self.root}/slurm-%j.out",
            *options,
            str(path),
        )
        return out.stdout.strip().split(";")[0]

    def show(self, job_id: str) -> str:
        """``scontrol -o -d show job`` (empty once the controller has forgotten the job)."""
        return self.run("scontrol", "--oneliner", "--details", "show", "job", job_id, check=False).stdout

    def state(self, job_id: str) -> str:
        m = re.search(r"JobState=(\S+)", self.show(job_id))
        return m.group(1) if m else "GONE"

    def gpu_indices(self, job_id: str) -> list[int]:
        """The GPU indices Slurm gave a job, read with a regex independent of the code under test."""
        m = re.search(r"GRES=gpu[^ (]*\(IDX:([0-9,-]+)\)", self.show(job_id))
        assert m, self.show(job_id)
        out: list[int] = []
        for part in m.group(1).split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
        return out

    def wait(self, job_id: str, states: set[str], timeout: float = 30) -> str:
        end = time.monotonic() + timeout
        while True:
            st = self.state(job_id)
            if st in states or time.monotonic() > end:
                assert st in states, f"job {job_id} is {st}, wanted {states}{self.logs()}"
                return st
            time.sleep(0.2)

    def logs(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.root / "log" / name
            if p.exists():
                tails.append(
                    f"\n--- {name} ---\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                )
        return "".join(tails)

    # -- daemons --------------------------------------------------------------------------

    def _start(self, name: str, *argv: str) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        self.procs[name] = subprocess.Popen(list(argv), env=self.env, stdout=log, stderr=log)

    def _stop(self, name: str, timeout: float = 15) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def start_controller(self, *, clear: bool = False) -> None:
        self._start("slurmctld", "slurmctld", "-D", *(["-c"] if clear else []))
        end = time.monotonic() + 30
        while self.run("scontrol", "ping", check=False, timeout=15).stdout.count("UP") < 1:
            assert time.monotonic() < end, f"slurmctld did not come up{self.logs()}"
            assert self.procs["slurmctld"].poll() is None, f"slurmctld exited{self.logs()}"
            time.sleep(0.3)

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def wait_idle(self, timeout: float = 40) -> None:
        end = time.monotonic() + timeout
        while True:
            st = self.run("sinfo", "--noheader", "--Node", "--format=%T", check=False).stdout.strip()
            if set(st.split()) == {"idle"}:
                return
            assert time.monotonic() < end, f"node state {st!r}, not idle{self.logs()}"
            time.sleep(0.3)

    def _step_daemons(self) -> list[int]:
        """slurmstepd processes of this cluster (they outlive slurmd): found by our SLURM_CONF."""
        marker = f"SLURM_CONF={self.conf}".encode()
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if b"slurmstepd" in (d / "cmdline").read_bytes() and marker in (d / "environ").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
        return pids

    def close(self) -> None:
        if "slurmctld" in self.procs:
            self.run("scancel", "--user=root", check=False)
            end = time.monotonic() + 15
            while time.monotonic() < end and self.run("squeue", "--noheader", check=False).stdout.strip():
                time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            self._stop(name)
        for pid in self._step_daemons():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _write_config(root: Path) -> Path:
    for d in ("state", "spool", "log", "munge", "gpus"):
        (root / d).mkdir(mode=0o700, exist_ok=True)
    for i in range(GPUS):
        (root / "gpus" / f"gpu{i}").touch()
    ctld, slurmd = _free_port(), _free_port()
    conf = root / "slurm.conf"
    conf.write_text(
        f"""\
ClusterName=gst
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
KillWait=2
MessageTimeout=3
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=8 RealMemory=1000 Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={NODE} MaxTime=INFINITE State=UP
"""
    )
    (root / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={root}/gpus/gpu[0-{GPUS - 1}]\n")
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    return conf


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    path = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    missing = [b for b in DAEMONS + CLIENTS if shutil.which(b, path=path) is None]
    if missing:
        _missing_or_fail(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        _missing_or_fail("slurmd must run as root to start jobs")
    root = tmp_path_factory.mktemp("slurm")
    conf = _write_config(root)
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": path}
    cluster = SlurmCluster(root=root, conf=conf, env=env)
    try:
        m = root / "munge"
        cluster._start(
            "munged",
            "munged",
            "--foreground",
            "--force",
            f"--socket={m}/munge.sock",
            f"--key-file={m}/munge.key",
            f"--log-file={m}/munged.log",
            f"--pid-file={m}/munged.pid",
            f"--seed-file={m}/munged.seed",
        )
        end = time.monotonic() + 15
        while not (m / "munge.sock").exists():
            assert time.monotonic() < end, "munged did not create its socket"
            time.sleep(0.1)
        cluster.start_controller(clear=True)
        cluster._start("slurmd", "slurmd", "-D", "-N", NODE)
        cluster.wait_idle()
        yield cluster
    finally:
        cluster.close()


class ControlledMetrics:
    """A metric ``Source`` the test controls: four GPUs on the Slurm node, utilisation per index.

    Samples are taken at the time asked for (the agent's simulated clock), so the window fills
    as fast as the test ticks. ``fail`` makes the next observations raise ``SourceError``.
    """

    name = "testmetrics"

    def __init__(self, node: str = NODE, gpus: int = GPUS) -> None:
        self.gpus = tuple(
            Gpu(f"GPU-test-{node}-{i}", node, i, "Test GPU 80GB", 81920.0, price_per_hour=2.0)
            for i in range(gpus)
        )
        self.util: dict[int, float | None] = dict.fromkeys(range(gpus), 0.0)
        self.mem_mib: dict[int, float] = dict.fromkeys(range(gpus), 4096.0)
        self.observed = 0

    def observe(self, now: datetime) -> Observation:
        self.observed += 1
        samples = tuple(
            Sample(
                g.uuid,
                now,
                gpu_util_pct=self.util[g.index],
                mem_used_mib=self.mem_mib[g.index],
                proc_cpu_pct=50.0,
            )
            for g in self.gpus
        )
        return Observation(at=now, gpus=self.gpus, samples=samples, workloads=())

    def close(self) -> None:
        pass


@pytest.fixture
def metrics() -> ControlledMetrics:
    return ControlledMetrics()


@pytest.fixture
def cleanup_jobs(slurm: SlurmCluster) -> Iterator[list[str]]:
    """Job ids a test submits; whatever still runs at its end is cancelled."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        slurm.run("scancel", *jobs, check=False)
        for job in jobs:
            slurm.wait(job, {"CANCELLED", "COMPLETED", "FAILED", "GONE", "TIMEOUT"}, timeout=20)
