"""One sampling pass over every GPU, MIG instance and GPU process NVML can see.

The pass is shared by the ``nvml`` source and the exporter. It reads through the choke
point only, so a value NVML cannot give is ``None`` and a GPU that fails is reported in
``errors`` while the others are still read.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpusteward.integrations.nvml.choke import ERROR_NOT_FOUND, SUCCESS, Nvml, Result
from gpusteward.integrations.nvml.health import NO_HEALTH, GpuHealth, HealthReader

MIB = 1024.0 * 1024.0
# NVML's PCIe counters are KB/s; 1 KB = 1024 bytes there.
KIB = 1024.0
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
# nvmlProcessInfo_t's instance ids when the process is not in a MIG instance.
NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU or MIG instance as NVML saw it. ``None``: NVML could not tell."""

    uuid: str
    index: int
    name: str
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    #: True/False on a MIG-capable GPU, None where MIG does not exist.
    mig_enabled: bool | None = None
    #: For a MIG instance: its parent GPU's UUID, its MIG device index and instance ids.
    parent_uuid: str | None = None
    mig_index: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    #: ECC, retirement, slowdown, PCIe replays and Xids; a MIG instance carries its GPU's.
    health: GpuHealth = NO_HEALTH

    @property
    def is_mig(self) -> bool:
        return self.parent_uuid is not None


@dataclass(frozen=True, slots=True)
class ProcReading:
    """One process on one GPU (or MIG instance)."""

    pid: int
    gpu_uuid: str
    #: ``compute`` or ``graphics``; a process that is both is listed once, as compute.
    type: str
    used_mib: float | None = None
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    at: datetime
    driver: str | None
    gpus: tuple[GpuReading, ...]
    processes: tuple[ProcReading, ...]
    errors: tuple[str, ...] = ()
    #: GPU indices NVML lists but could not identify (no UUID): unreadable this pass.
    lost: tuple[int, ...] = ()


def _num(r: Result, scale: float = 1.0) -> float | None:
    if not r.ok or r.value is None:
        return None
    try:
        return float(r.value) / scale
    except (TypeError, ValueError):
        return None


def _int(r: Result) -> int | None:
    return r.value if r.ok and isinstance(r.value, int) else None


@dataclass
class _Gpu:
    handle: Any
    reading: GpuReading
    migs: list[tuple[Any, GpuReading]] = field(default_factory=list)


class NvmlSampler:
    """Reads a node through one ``Nvml`` choke point. Safe to call from several threads."""

    def __init__(self, nvml: Nvml, *, process_utilization: bool = True) -> None:
        self.nvml = nvml
        self.process_utilization = process_utilization
        self._lock = threading.Lock()
        # Per GPU uuid: the newest per-process utilisation sample seen (µs since the epoch).
        self._last_util_us: dict[str, int] = {}
        self.health = HealthReader(nvml)

    def sample(self, now: datetime) -> NodeSnapshot:
        with self._lock:
            return self._sample(now)

    def holdings(self) -> dict[int, tuple[str, ...]] | None:
        """PID → GPU (or MIG instance) UUIDs it holds now; ``None`` when NVML cannot list them."""
        with self._lock:
            count = _int(self.nvml.call("nvmlDeviceGetCount"))
            if count is None:
                return None
            out: dict[int, list[str]] = {}
            errors: list[str] = []
            for i in range(count):
                gpu = self._device(i, errors, metrics=False)
                if gpu is None:
                    return None  # a GPU we cannot read might be the one still held
                for proc in self._processes(gpu, {}, errors):
                    out.setdefault(proc.pid, []).append(proc.gpu_uuid)
            if errors:
                return None  # a process list or MIG instance we could not read: no verdict
            return {pid: tuple(dict.fromkeys(uuids)) for pid, uuids in out.items()}

    def _sample(self, now: datetime) -> NodeSnapshot:
        nvml = self.nvml
        errors: list[str] = []
        driver = nvml.call("nvmlSystemGetDriverVersion").value
        count = _int(nvml.call("nvmlDeviceGetCount"))
        if count is None:
            return NodeSnapshot(now, driver, (), (), ("nvmlDeviceGetCount failed: no GPU can be read",))
        gpus: list[GpuReading] = []
        procs: list[ProcReading] = []
        lost: list[int] = []
        for i in range(count):
            gpu = self._device(i, errors, metrics=True)
            if gpu is None:
                lost.append(i)
                continue
            gpus.append(gpu.reading)
            gpus.extend(r for _, r in gpu.migs)
            util = self._process_util(gpu) if self.process_utilization else {}
            procs.extend(self._processes(gpu, util, errors))
        # Drained after every GPU is registered, so a GPU seen for the first time reports 0.
        xids = self.health.drain()
        gpus = [
            dataclasses.replace(r, health=r.health.with_xid(xids.get(r.parent_uuid or r.uuid))) for r in gpus
        ]
        return NodeSnapshot(now, driver, tuple(gpus), tuple(procs), tuple(errors), tuple(lost))

    def close(self) -> None:
        with self._lock:
            self.health.close()

    def _device(self, index: int, errors: list[str], *, metrics: bool) -> _Gpu | None:
        nvml = self.nvml
        h = nvml.call("nvmlDeviceGetHandleByIndex", index)
        uuid = nvml.call("nvmlDeviceGetUUID", h.value) if h.ok else h
        if not uuid.ok or not uuid.value:
            errors.append(f"GPU {index} unreadable: {uuid.reason}")
            return None
        mig = nvml.call("nvmlDeviceGetMigMode", h.value)
        mig_on = bool(mig.value[0]) if mig.ok and mig.value else (False if mig.ok else None)
        name = nvml.call("nvmlDeviceGetName", h.value).value or "NVIDIA GPU"
        reading = GpuReading(uuid=str(uuid.value), index=index, name=str(name), mig_enabled=mig_on)
        if metrics:
            reading = self._metrics(h.value, reading)
            self.health.register(h.value, reading.uuid)
        gpu = _Gpu(h.value, reading)
        if mig_on:
            gpu.migs = list(self._migs(gpu, errors, metrics=metrics))
        return gpu

    def _metrics(self, handle: Any, r: GpuReading) -> GpuReading:
        call = self.nvml.call
        mem = call("nvmlDeviceGetMemoryInfo", handle)
        util = call("nvmlDeviceGetUtilizationRates", handle)
        return GpuReading(
            uuid=r.uuid,
            index=r.index,
            name=r.name,
            memory_total_mib=float(mem.value.total) / MIB if mem.ok else None,
            memory_used_mib=float(mem.value.used) / MIB if mem.ok else None,
            util_gpu_pct=float(util.value.gpu) if util.ok else None,
            util_mem_pct=float(util.value.memory) if util.ok else None,
            power_w=_num(call("nvmlDeviceGetPowerUsage", handle), 1000.0),
            temp_c=_num(call("nvmlDeviceGetTemperature", handle, NVML_TEMPERATURE_GPU)),
            pcie_rx_bytes_per_s=_scaled(call("nvmlDeviceGetPcieThroughput", handle, NVML_PCIE_UTIL_RX_BYTES)),
            pcie_tx_bytes_per_s=_scaled(call("nvmlDeviceGetPcieThroughput", handle, NVML_PCIE_UTIL_TX_BYTES)),
            mig_enabled=r.mig_enabled,
            health=self.health.read(handle, r.uuid),
        )

    def _migs(self, gpu: _Gpu, errors: list[str], *, metrics: bool) -> Iterator[tuple[Any, GpuReading]]:
        call = self.nvml.call
        parent = gpu.reading
        slots = _int(call("nvmlDeviceGetMaxMigDeviceCount", gpu.handle)) or 0
        for k in range(slots):
            # An empty slot answers NOT_FOUND: no instance there, nothing wrong.
            h = call("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, k, empty=frozenset({ERROR_NOT_FOUND}))
            if not h.ok:
                errors.append(f"GPU {parent.index} MIG device {k}: {h.reason}")
                continue
            if h.value is None:
                continue
            uuid = call("nvmlDeviceGetUUID", h.value)
            if not uuid.ok or not uuid.value:
                errors.append(f"GPU {parent.index} MIG device {k} unreadable: {uuid.reason}")
                continue
            mem = call("nvmlDeviceGetMemoryInfo", h.value) if metrics else Result(None, "skipped")
            yield (
                h.value,
                GpuReading(
                    uuid=str(uuid.value),
                    index=parent.index,
                    name=str(call("nvmlDeviceGetName", h.value).value or f"{parent.name} MIG"),
                    memory_total_mib=float(mem.value.total) / MIB if mem.ok else None,
                    memory_used_mib=float(mem.value.used) / MIB if mem.ok else None,
                    # NVML has no utilisation or power per MIG instance (DCGM has); the die's
                    # temperature is the instance's too.
                    temp_c=parent.temp_c,
                    parent_uuid=parent.uuid,
                    mig_index=k,
                    gpu_instance_id=_int(call("nvmlDeviceGetGpuInstanceId", h.value)),
                    compute_instance_id=_int(call("nvmlDeviceGetComputeInstanceId", h.value)),
                    # ECC, retirement, clocks and Xids belong to the whole GPU.
                    health=parent.health,
                ),
            )

    def _process_util(self, gpu: _Gpu) -> dict[int, tuple[float, float]]:
        """PID → (sm %, memory %) from the samples newer than the last pass; {} when unsupported."""
        uuid = gpu.reading.uuid
        since = self._last_util_us.get(uuid, 0)
        # NOT_FOUND (and, from some pynvml versions, a stray SUCCESS) mean no new samples.
        r = self.nvml.call(
            "nvmlDeviceGetProcessUtilization",
            gpu.handle,
            since,
            empty=frozenset({ERROR_NOT_FOUND, SUCCESS}),
            default=[],
        )
        if not r.ok or not r.value:
            return {}
        newest: dict[int, tuple[int, float, float]] = {}
        for s in r.value:
            ts = int(s.timeStamp)
            if ts > newest.get(int(s.pid), (-1, 0.0, 0.0))[0]:
                newest[int(s.pid)] = (ts, float(s.smUtil), float(s.memUtil))
        self._last_util_us[uuid] = max([since, *(v[0] for v in newest.values())])
        return {pid: (sm, mem) for pid, (_, sm, mem) in newest.items()}

    def _processes(
        self, gpu: _Gpu, util: Mapping[int, tuple[float, float]], errors: list[str]
    ) -> Iterator[ProcReading]:
        call = self.nvml.call
        by_instance = {(r.gpu_instance_id, r.compute_instance_id): r.uuid for _, r in gpu.migs}
        by_gi = {r.gpu_instance_id: r.uuid for _, r in gpu.migs}
        seen: set[tuple[int, str]] = set()
        for kind, function in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            r = call(function, gpu.handle)
            if not r.ok:
                # Boards without graphics say so; without the compute list nothing can be said.
                if kind == "compute" or not r.unsupported:
                    errors.append(f"GPU {gpu.reading.index} {kind} processes: {r.reason}")
                continue
            for p in r.value or ():
                pid = int(p.pid)
                target = gpu.reading.uuid
                gi = getattr(p, "gpuInstanceId", NO_INSTANCE)
                if gpu.migs and gi not in (None, NO_INSTANCE):
                    ci = getattr(p, "computeInstanceId", NO_INSTANCE)
                    target = by_instance.get((gi, ci)) or by_gi.get(gi) or target
                if (pid, target) in seen:
                    continue
                seen.add((pid, target))
                used = getattr(p, "usedGpuMemory", None)
                sm_mem = util.get(pid)
                yield ProcReading(
                    pid=pid,
                    gpu_uuid=target,
                    type=kind,
                    # WDDM (Windows) and some containers report no per-process memory: None.
                    used_mib=float(used) / MIB if isinstance(used, int) else None,
                    sm_util_pct=sm_mem[0] if sm_mem else None,
                    mem_util_pct=sm_mem[1] if sm_mem else None,
                )


def _scaled(r: Result) -> float | None:
    v = _num(r)
    return None if v is None else v * KIB
