"""``gpusteward exporter``: per-GPU and per-process metrics of this node in Prometheus format.

dcgm-exporter labels a GPU with the pod that holds it; this labels every *process* on
every GPU with its user, container, pod, namespace and Slurm job, so a central
gpusteward (``source: prometheus``) or a Grafana panel sees who holds what and how hard
it works. Each scrape reads NVML and /proc afresh; a value NVML cannot give is left out
of the scrape (never exported as 0).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.integrations.nvml.procfs import ProcInfo, ProcReader
from gpusteward.integrations.nvml.sampler import MIB, GpuReading, NodeSnapshot, NvmlSampler
from gpusteward.integrations.nvml.source import attribution_labels

GPU_LABELS = ("gpu", "UUID", "Hostname", "modelName", "gpu_instance")
PROCESS_LABELS = (
    "gpu",
    "UUID",
    "Hostname",
    "pid",
    "user",
    "container",
    "pod",
    "namespace",
    "pod_uid",
    "slurm_job",
    "command",
    "type",
)

#: (name, help, attribute of GpuReading, scale to the exported unit).
GPU_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    (
        "gpusteward_gpu_utilization_percent",
        "Time a kernel ran on the GPU over the last sample period.",
        "util_gpu_pct",
        1.0,
    ),
    (
        "gpusteward_gpu_memory_utilization_percent",
        "Time device memory was read or written.",
        "util_mem_pct",
        1.0,
    ),
    ("gpusteward_gpu_memory_used_bytes", "Device memory allocated.", "memory_used_mib", MIB),
    ("gpusteward_gpu_memory_total_bytes", "Device memory in total.", "memory_total_mib", MIB),
    ("gpusteward_gpu_power_watts", "Power drawn by the board.", "power_w", 1.0),
    ("gpusteward_gpu_temperature_celsius", "GPU die temperature.", "temp_c", 1.0),
    ("gpusteward_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput.", "pcie_rx_bytes_per_s", 1.0),
    ("gpusteward_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput.", "pcie_tx_bytes_per_s", 1.0),
)


#: (name, help, attribute of GpuHealth): the health readings, absent where NVML cannot give them.
HEALTH_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "gpusteward_gpu_xid_code",
        "Last Xid the driver reported since the previous scrape (0: none).",
        "xid_code",
    ),
    ("gpusteward_gpu_xid_fatal", "1 when that Xid means the GPU itself failed.", "xid_fatal"),
    (
        "gpusteward_gpu_ecc_uncorrected_errors",
        "Volatile double-bit (uncorrected) ECC errors.",
        "ecc_dbe_count",
    ),
    ("gpusteward_gpu_ecc_corrected_errors", "Volatile single-bit (corrected) ECC errors.", "ecc_sbe_count"),
    ("gpusteward_gpu_retired_pages", "Retired pages (Volta and older) or remapped rows.", "retired_pages"),
    (
        "gpusteward_gpu_row_remap_failure",
        "1 when row remapping failed or a page retirement is pending.",
        "row_remap_failure",
    ),
    (
        "gpusteward_gpu_throttled",
        "1 while a thermal or hardware slowdown or power brake holds the clocks.",
        "throttled",
    ),
    ("gpusteward_gpu_pcie_replays", "PCIe replays since the GPU was reset.", "pcie_replay_count"),
)


@dataclass(frozen=True, slots=True)
class _Proc:
    labels: list[str]
    used_bytes: float | None
    sm_pct: float | None
    mem_pct: float | None
    info: ProcInfo | None


def _gpu_labels(r: GpuReading, node: str) -> list[str]:
    instance = "" if r.gpu_instance_id is None else str(r.gpu_instance_id)
    return [str(r.index), r.uuid, node, r.name, instance]


class NodeCollector(Collector):
    """A prometheus_client collector that samples NVML and /proc on every scrape."""

    def __init__(
        self, sampler: NvmlSampler, procs: ProcReader, node: str, *, clock: Clock | None = None
    ) -> None:
        self.sampler = sampler
        self.procs = procs
        self.node = node
        self.clock = clock or SystemClock()
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # the families depend on what the node has; nothing to pre-register

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        with self._lock:
            snap = self.sampler.sample(self.clock.now())
            infos = {pid: self.procs.read(pid) for pid in sorted({p.pid for p in snap.processes})}
        yield from self._gpus(snap)
        yield from self._processes(snap, infos)
        yield from self._health(snap, time.perf_counter() - started)

    def _gpus(self, snap: NodeSnapshot) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "gpusteward_gpu_info",
            "One series per GPU and MIG instance: model, driver, MIG mode and parent.",
            labels=[*GPU_LABELS, "driver_version", "mig_mode", "parent_uuid"],
        )
        for r in snap.gpus:
            mig = "" if r.mig_enabled is None else ("enabled" if r.mig_enabled else "disabled")
            info.add_metric([*_gpu_labels(r, self.node), snap.driver or "", mig, r.parent_uuid or ""], 1.0)
        yield info
        for name, text, attr, scale in GPU_GAUGES:
            family = GaugeMetricFamily(name, text, labels=list(GPU_LABELS))
            for r in snap.gpus:
                value = getattr(r, attr)
                if value is not None:
                    family.add_metric(_gpu_labels(r, self.node), float(value) * scale)
            yield family
        for name, text, attr in HEALTH_GAUGES:
            family = GaugeMetricFamily(name, text, labels=list(GPU_LABELS))
            for r in snap.gpus:
                value = getattr(r.health, attr)
                if value is not None:
                    family.add_metric(_gpu_labels(r, self.node), float(value))
            yield family

    def _processes(self, snap: NodeSnapshot, infos: dict[int, ProcInfo | None]) -> Iterator[Metric]:
        index = {r.uuid: r.index for r in snap.gpus}
        rows = []
        for p in snap.processes:
            info = infos.get(p.pid)
            who = attribution_labels(info)
            rows.append(
                _Proc(
                    [
                        str(index.get(p.gpu_uuid, "")),
                        p.gpu_uuid,
                        self.node,
                        str(p.pid),
                        who["user"],
                        who["container"],
                        who["pod"],
                        who["namespace"],
                        who["pod_uid"],
                        who["slurm_job"],
                        info.comm if info else "",
                        p.type,
                    ],
                    None if p.used_mib is None else p.used_mib * MIB,
                    p.sm_util_pct,
                    p.mem_util_pct,
                    info,
                )
            )
        gauges = (
            (
                "gpusteward_process_gpu_memory_used_bytes",
                "GPU memory the process holds on this GPU.",
                "used_bytes",
            ),
            (
                "gpusteward_process_sm_utilization_percent",
                "The process's share of SM time (NVML samples).",
                "sm_pct",
            ),
            (
                "gpusteward_process_memory_utilization_percent",
                "The process's share of memory bandwidth.",
                "mem_pct",
            ),
        )
        for name, text, attr in gauges:
            family = GaugeMetricFamily(name, text, labels=list(PROCESS_LABELS))
            for row in rows:
                value = getattr(row, attr)
                if value is not None:
                    family.add_metric(row.labels, float(value))
            yield family
        start = GaugeMetricFamily(
            "gpusteward_process_start_time_seconds",
            "When the process started (Unix time).",
            labels=list(PROCESS_LABELS),
        )
        cpu = CounterMetricFamily(
            "gpusteward_process_cpu_seconds",
            "CPU time the process used (user + system).",
            labels=list(PROCESS_LABELS),
        )
        written = CounterMetricFamily(
            "gpusteward_process_write_bytes",
            "Bytes the process caused to be written to storage (a burst is a checkpoint).",
            labels=list(PROCESS_LABELS),
        )
        for row in rows:
            if row.info is None:
                continue
            start.add_metric(row.labels, row.info.started_at.timestamp())
            cpu.add_metric(row.labels, row.info.cpu_seconds)
            if row.info.write_bytes is not None:
                written.add_metric(row.labels, float(row.info.write_bytes))
        yield from (start, cpu, written)

    def _health(self, snap: NodeSnapshot, seconds: float) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "gpusteward_exporter_scrape_errors",
            "Problems met while reading this scrape.",
            value=len(snap.errors),
        )
        yield GaugeMetricFamily(
            "gpusteward_exporter_scrape_duration_seconds", "Time spent reading NVML and /proc.", value=seconds
        )
        missing = GaugeMetricFamily(
            "gpusteward_nvml_function_unavailable",
            "NVML functions this node's driver or GPUs do not support (their metrics are absent).",
            labels=["Hostname", "function"],
        )
        for function in sorted(self.sampler.nvml.unavailable):
            missing.add_metric([self.node, function], 1.0)
        yield missing


def registry_for(collector: NodeCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(
    collector: NodeCollector,
    port: int,
    address: str = "0.0.0.0",  # noqa: S104 - an exporter serves the network by design
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` in a daemon thread; returns (server, thread). ``server.shutdown()`` stops it."""
    server, thread = start_http_server(port, address, registry_for(collector))
    return server, thread
