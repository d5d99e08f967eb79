"""``source: nvml``: this node's GPUs through NVML, the processes holding them through /proc.

Each GPU (or MIG instance: a GPU of its own, keyed by its UUID; its parent is then not
listed) gets one ``Sample`` per observation, with what NVML could read and ``None`` for
the rest. Each process holding GPU memory is one ``Workload`` (``process:<node>:<pid>``)
owned by its user, with the container, pod and Slurm job it runs in as labels, and in
``ref`` the PID and its start time in clock ticks, so an executor can tell a reused PID.
"""

from __future__ import annotations

import logging
import math
import socket
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import (
    EXCLUDE_UNTIL_KEY,
    PROTECT_KEY,
    Gpu,
    Observation,
    Owner,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.procfs import ProcInfo, ProcReader
from gpusteward.integrations.nvml.sampler import GpuReading, NodeSnapshot, NvmlSampler, ProcReading
from gpusteward.integrations.nvml.settings import NvmlSourceSettings

log = logging.getLogger(__name__)

#: Annotation (or label) naming the signal a workload saves a checkpoint on (``SIGUSR1``, ``10``).
CHECKPOINT_SIGNAL_KEY = "gpusteward.io/checkpoint-signal"
SOURCE_NAME = "nvml"


def node_name(configured: str) -> str:
    return configured or socket.gethostname()


def team_of(info: ProcInfo | None, user: str, teams: Mapping[str, str]) -> str:
    """The configured team of ``user``, else the pod's namespace, else the Slurm account."""
    if user in teams:
        return teams[user]
    if info is None:
        return ""
    return info.pod_namespace or info.env.get("SLURM_JOB_ACCOUNT", "") or info.env.get("GPUSTEWARD_TEAM", "")


def attribution_labels(info: ProcInfo | None) -> dict[str, str]:
    """Where a process runs, as the exporter labels it: empty strings when not known."""
    if info is None:
        return {"user": "", "container": "", "pod": "", "namespace": "", "pod_uid": "", "slurm_job": ""}
    return {
        "user": info.user,
        "container": info.cgroup.container_short,
        "pod": info.pod_name,
        "namespace": info.pod_namespace,
        # From the cgroup path: joins the pod with the API server's object even where the
        # container sets no POD_NAME / POD_NAMESPACE environment.
        "pod_uid": info.cgroup.pod_uid,
        "slurm_job": info.slurm_job,
    }


@dataclass
class _Counters:
    at: datetime
    cpu_seconds: float
    write_bytes: int | None


def _rate(new: float | None, old: float | None, seconds: float) -> float | None:
    if new is None or old is None or seconds <= 0 or new < old:
        return None
    return (new - old) / seconds


class NvmlSource:
    """Implements ``gpusteward.domain.ports.Source`` for the local node."""

    name = SOURCE_NAME

    def __init__(
        self,
        nvml: Nvml,
        settings: NvmlSourceSettings | None = None,
        *,
        procs: ProcReader | None = None,
        sampler: NvmlSampler | None = None,
    ) -> None:
        self.settings = settings or NvmlSourceSettings()
        nvml.start()  # SourceUnavailable, with one clear line, when there is no driver
        self.nvml = nvml
        self.sampler = sampler or NvmlSampler(nvml, process_utilization=self.settings.process_utilization)
        self.procs = procs or ProcReader(self.settings.proc_root)
        self.node = node_name(self.settings.node)
        self._gpus: dict[int, list[Gpu]] = {}  # by physical index: what a lost GPU was
        self._counters: dict[tuple[int, int], _Counters] = {}
        self._first_seen: dict[int, datetime] = {}
        self._burst_until: dict[tuple[int, int], datetime] = {}

    def close(self) -> None:
        self.sampler.close()
        self.nvml.stop()

    def observe(self, now: datetime) -> Observation:
        snap = self.sampler.sample(now)
        if not snap.gpus and (snap.lost or snap.errors):
            raise SourceError("; ".join(snap.errors) or "NVML could read no GPU")
        errors = list(snap.errors)
        gpus = self._gpus_of(snap, errors)
        known = {g.uuid for g in gpus}
        procs = [p for p in snap.processes if p.gpu_uuid in known]
        infos = {pid: self.procs.read(pid) for pid in sorted({p.pid for p in procs})}
        cpu_pct, write_rate = self._rates(now, infos)
        workloads = self._workloads(now, procs, infos, cpu_pct, write_rate, gpus, errors)
        samples = self._samples(snap, known, procs, infos, cpu_pct)
        return Observation(
            at=now, gpus=tuple(gpus), samples=tuple(samples), workloads=tuple(workloads), errors=tuple(errors)
        )

    def _gpus_of(self, snap: NodeSnapshot, errors: list[str]) -> list[Gpu]:
        by_index: dict[int, list[Gpu]] = defaultdict(list)
        seen: set[str] = set()
        for r in snap.gpus:
            if r.mig_enabled and not r.is_mig:
                continue  # the MIG instances are the GPUs; the parent holds no process itself
            if r.uuid in seen:
                errors.append(f"GPU {r.index}: UUID {r.uuid} seen twice; only the first is used")
                continue
            seen.add(r.uuid)
            total = r.memory_total_mib if r.memory_total_mib is not None else math.nan
            by_index[r.index].append(Gpu(r.uuid, self.node, r.index, r.name, total))
        for index in snap.lost:
            # Listed without a sample: its window goes stale and nothing is done about it.
            by_index[index] = self._gpus.get(index, [])
        self._gpus = dict(by_index)
        return [g for index in sorted(by_index) for g in by_index[index]]

    def _rates(
        self, now: datetime, infos: Mapping[int, ProcInfo | None]
    ) -> tuple[dict[int, float | None], dict[int, float | None]]:
        cpu: dict[int, float | None] = {}
        write: dict[int, float | None] = {}
        counters: dict[tuple[int, int], _Counters] = {}
        for pid, info in infos.items():
            if info is None:
                cpu[pid] = write[pid] = None
                continue
            key = (pid, info.start_ticks)
            prev = self._counters.get(key)
            counters[key] = _Counters(now, info.cpu_seconds, info.write_bytes)
            dt = (now - prev.at).total_seconds() if prev else 0.0
            rate = _rate(info.cpu_seconds, prev.cpu_seconds if prev else None, dt)
            cpu[pid] = None if rate is None else rate * 100.0
            write[pid] = _rate(info.write_bytes, prev.write_bytes if prev else None, dt)
        self._counters = counters
        return cpu, write

    def _samples(
        self,
        snap: NodeSnapshot,
        known: set[str],
        procs: Iterable[ProcReading],
        infos: Mapping[int, ProcInfo | None],
        cpu_pct: Mapping[int, float | None],
    ) -> list[Sample]:
        holders: dict[str, list[int]] = defaultdict(list)
        for p in procs:
            info = infos.get(p.pid)
            # An unattributed holder counts too: its unknown CPU makes the sum unknown.
            if info is None or not info.exited:
                holders[p.gpu_uuid].append(p.pid)
        out = []
        for r in snap.gpus:
            if r.uuid not in known:
                continue
            sample = Sample(
                gpu_uuid=r.uuid,
                at=snap.at,
                gpu_util_pct=r.util_gpu_pct,
                mem_used_mib=r.memory_used_mib,
                power_w=r.power_w,
                temp_c=r.temp_c,
                pcie_rx_bytes_per_s=r.pcie_rx_bytes_per_s,
                pcie_tx_bytes_per_s=r.pcie_tx_bytes_per_s,
                proc_cpu_pct=_sum_known([cpu_pct.get(pid) for pid in holders.get(r.uuid, [])]),
                **r.health.fields(),
            )
            if _any_value(sample, r):
                out.append(sample)
        return out

    def _workloads(
        self,
        now: datetime,
        procs: Iterable[ProcReading],
        infos: Mapping[int, ProcInfo | None],
        cpu_pct: Mapping[int, float | None],
        write_rate: Mapping[int, float | None],
        gpus: Iterable[Gpu],
        errors: list[str],
    ) -> list[Workload]:
        order = {g.uuid: (g.index, i) for i, g in enumerate(gpus)}
        held: dict[int, list[str]] = defaultdict(list)
        kinds: dict[int, set[str]] = defaultdict(set)
        for p in procs:
            held[p.pid].append(p.gpu_uuid)
            kinds[p.pid].add(p.type)
        first_seen = {pid: self._first_seen.get(pid, now) for pid in held}
        self._first_seen = first_seen
        bursts: dict[tuple[int, int], datetime] = {}
        unattributed = []
        out = []
        for pid, uuids in held.items():
            if kinds[pid] == {"graphics"} and not self.settings.graphics_processes:
                continue
            info = infos.get(pid)
            if info is not None and info.exited:
                continue  # a zombie waiting to be reaped; the driver is freeing its memory
            if info is None:
                unattributed.append(pid)
            uuids = sorted(dict.fromkeys(uuids), key=lambda u: order.get(u, (0, 0)))
            until = None
            if info is not None:
                key = (pid, info.start_ticks)
                until = self._burst_until.get(key)
                rate = write_rate.get(pid)
                if rate is not None and rate >= self.settings.write_burst_bytes_per_second:
                    until = now + timedelta(minutes=self.settings.checkpoint_exclude_minutes)
                if until is not None and until > now:
                    bursts[key] = until
                else:
                    until = None
            out.append(self._workload(pid, info, tuple(uuids), first_seen[pid], until))
        self._burst_until = bursts
        if unattributed:
            errors.append(
                f"no /proc entry for GPU process(es) {', '.join(map(str, sorted(unattributed)))} "
                f"under {self.procs.root}: run in the host PID namespace to attribute them"
            )
        # Newest first: when processes share a GPU, the window keeps the oldest one's history
        # (the last holder listed wins), so a process joining does not wipe it.
        out.sort(key=lambda w: w.started_at, reverse=True)
        return out

    def _workload(
        self,
        pid: int,
        info: ProcInfo | None,
        uuids: tuple[str, ...],
        first_seen: datetime,
        until: datetime | None,
    ) -> Workload:
        node = self.node
        labels = {"gpusteward.io/node": node, "gpusteward.io/pid": str(pid)}
        annotations: dict[str, str] = {}
        ref = {"pid": str(pid), "node": node}
        if info is None:
            return Workload(
                id=f"process:{node}:{pid}",
                kind=WorkloadKind.PROCESS,
                name=f"pid {pid}",
                owner=Owner(user="", team=""),
                gpus_requested=len(uuids),
                gpu_uuids=uuids,
                started_at=first_seen,  # no start time without /proc: the executor will not act
                source=self.name,
                labels=labels,
                ref=ref,
            )
        cg = info.cgroup
        extra = {
            "gpusteward.io/container-id": cg.container_id,
            "gpusteward.io/runtime": cg.runtime,
            "gpusteward.io/pod-uid": cg.pod_uid,
            "gpusteward.io/pod": info.pod_name,
            "gpusteward.io/namespace": info.pod_namespace,
            "gpusteward.io/qos": cg.qos,
            "gpusteward.io/slurm-job": info.slurm_job,
        }
        labels.update({k: v for k, v in extra.items() if v})
        annotations["gpusteward.io/command"] = info.command[:500]
        if cg.path:
            annotations["gpusteward.io/cgroup"] = cg.path
        env = info.env
        for key, var in (
            (CHECKPOINT_SIGNAL_KEY, "GPUSTEWARD_CHECKPOINT_SIGNAL"),
            (PROTECT_KEY, "GPUSTEWARD_PROTECT"),
            (EXCLUDE_UNTIL_KEY, "GPUSTEWARD_EXCLUDE_UNTIL"),
        ):
            if env.get(var):
                annotations[key] = env[var]
        if until is not None and _later(until, annotations.get(EXCLUDE_UNTIL_KEY)):
            # A write burst is a checkpoint being saved: leave the process alone for a while.
            annotations[EXCLUDE_UNTIL_KEY] = until.isoformat()
        ref.update({"start_ticks": str(info.start_ticks), "uid": "" if info.uid is None else str(info.uid)})
        return Workload(
            id=f"process:{node}:{pid}",
            kind=WorkloadKind.PROCESS,
            name=info.command[:80],
            owner=Owner(user=info.user, team=team_of(info, info.user, self.settings.teams)),
            gpus_requested=len(uuids),
            gpu_uuids=uuids,
            started_at=info.started_at,
            source=self.name,
            labels=labels,
            annotations=annotations,
            ref=ref,
        )


def _later(at: datetime, other: str | None) -> bool:
    """Whether ``at`` is later than the RFC 3339 time ``other`` (absent: yes; malformed: no, so the
    owner's value stands and the policy guard treats it as excluded)."""
    if other is None:
        return True
    try:
        theirs = datetime.fromisoformat(other.strip().upper())
    except ValueError:
        return False
    return theirs.tzinfo is not None and at > theirs


def _sum_known(values: list[float | None]) -> float | None:
    """The sum, or None when any term is unknown: a partial sum could look like a stall."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _any_value(sample: Sample, r: GpuReading) -> bool:
    return any(
        v is not None
        for v in (
            r.util_gpu_pct,
            r.memory_used_mib,
            r.power_w,
            r.temp_c,
            r.pcie_rx_bytes_per_s,
            sample.proc_cpu_pct,
        )
    )
