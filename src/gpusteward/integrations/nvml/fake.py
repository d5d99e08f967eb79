"""A stand-in for the ``pynvml`` module, answering from recorded ``nvidia-smi`` captures.

It sits behind the choke point exactly where nvidia-ml-py would: same function names,
same return shapes (byte counts, milliwatts, KB/s, process structs), same error type with
an NVML return code. A value the capture does not hold is answered "not supported", as a
real GPU answers for a counter it lacks. ``captures.py`` builds ``FakeNode``s from real
captures; tests and the benchmark may also build them by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from gpusteward.integrations.nvml import choke
from gpusteward.integrations.nvml.health import EVENT_XID

MIB = 1024 * 1024


@dataclass
class FakeProcess:
    pid: int
    used_mib: float | None
    type: str = "compute"  # compute, graphics or both ("C+G")
    name: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None


@dataclass
class FakeMig:
    index: int
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None


@dataclass
class FakeGpu:
    uuid: str
    name: str
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    pcie_rx_kb_per_s: float | None = None
    pcie_tx_kb_per_s: float | None = None
    #: None: the GPU has no MIG (the call is not supported).
    mig_enabled: bool | None = None
    migs: list[FakeMig] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    #: The GPU fell off the bus: every call about it fails with GPU_IS_LOST.
    lost: bool = False
    # Health (None: the GPU does not report it, as without ECC). Tests may raise the
    # counters between two passes; ``FakeNvmlLib.inject_xid`` raises an Xid event.
    ecc_sbe: int | None = None  # volatile corrected total
    ecc_dbe: int | None = None  # volatile uncorrected total
    retired_sbe_pages: int | None = None  # Volta and older
    retired_dbe_pages: int | None = None
    retired_pending: bool | None = None
    #: (correctable, uncorrectable, pending, failure): Ampere and newer.
    remapped_rows: tuple[int, int, bool, bool] | None = None
    clocks_event_reasons: int | None = None
    pcie_replays: int | None = None
    #: The GPU delivers Xid events (``nvmlEventTypeXidCriticalError``).
    xid_events: bool = True


@dataclass
class FakeNode:
    gpus: list[FakeGpu]
    driver: str | None = None
    #: Per-process utilisation samples exist (a capture with ``pmon``); else "not supported".
    process_util: bool = False
    #: The time (µs since the epoch) stamped on every per-process utilisation sample.
    util_time_us: int = 1


class FakeNVMLError(Exception):
    """pynvml's ``NVMLError``: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


_MIG_SLOTS = 7  # an A100/H100 has up to seven MIG devices


class FakeNvmlLib:
    """The subset of ``pynvml`` the sampler calls. ``node`` may be a callable, read on every call,
    so a test can change what the "driver" reports between two passes."""

    NVMLError = FakeNVMLError

    def __init__(
        self,
        node: FakeNode | Callable[[], FakeNode],
        *,
        init_error: int | None = None,
        missing: Collection[str] = (),
    ) -> None:
        self._node = node
        self._init_error = init_error
        self._missing = frozenset(missing)
        self._lock = threading.Lock()
        self.initialised = 0
        self.calls = 0
        self._event_sets: list[_EventSet] = []

    def node(self) -> FakeNode:
        return self._node() if callable(self._node) else self._node

    def _gpu(self, handle: Any) -> FakeGpu:
        self.calls += 1
        gpus = self.node().gpus
        idx = handle[0] if isinstance(handle, tuple) else handle
        if not isinstance(idx, int) or not 0 <= idx < len(gpus):
            raise FakeNVMLError(choke.ERROR_GPU_NOT_FOUND)
        gpu = gpus[idx]
        if gpu.lost:
            raise FakeNVMLError(choke.ERROR_GPU_IS_LOST)
        return gpu

    def _mig(self, handle: Any) -> FakeMig | None:
        if not isinstance(handle, tuple):
            return None
        gpu = self._gpu(handle)
        return next((m for m in gpu.migs if m.index == handle[1]), None)

    def _check(self, name: str) -> None:
        if name in self._missing:
            raise FakeNVMLError(choke.ERROR_FUNCTION_NOT_FOUND)
        if not self.initialised:
            raise FakeNVMLError(choke.ERROR_UNINITIALIZED)

    @staticmethod
    def _have(value: Any) -> Any:
        if value is None:
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self._init_error is not None:
            raise FakeNVMLError(self._init_error)
        with self._lock:
            self.initialised += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        with self._lock:
            self.initialised = max(0, self.initialised - 1)

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._check("nvmlSystemGetDriverVersion")
        return str(self._have(self.node().driver))

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check("nvmlDeviceGetCount")
        return len(self.node().gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        self._check("nvmlDeviceGetHandleByIndex")
        self._gpu(index)
        return index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: N802
        self._check("nvmlDeviceGetUUID")
        mig = self._mig(handle)
        return mig.uuid if mig is not None else self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:  # noqa: N802
        self._check("nvmlDeviceGetName")
        gpu, mig = self._gpu(handle), self._mig(handle)
        return f"{gpu.name} MIG {mig.profile}".strip() if mig is not None else gpu.name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:  # noqa: N802
        self._check("nvmlDeviceGetMemoryInfo")
        gpu, mig = self._gpu(handle), self._mig(handle)
        total, used = (
            (mig.memory_total_mib, mig.memory_used_mib)
            if mig
            else (gpu.memory_total_mib, gpu.memory_used_mib)
        )
        total, used = self._have(total), self._have(used)
        return SimpleNamespace(total=int(total * MIB), used=int(used * MIB), free=int((total - used) * MIB))

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:  # noqa: N802
        self._check("nvmlDeviceGetUtilizationRates")
        gpu = self._gpu(handle)
        if self._mig(handle) is not None or gpu.util_gpu_pct is None:
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=int(gpu.util_gpu_pct), memory=int(self._have(gpu.util_mem_pct)))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetPowerUsage")
        watts: float = self._have(self._gpu(handle).power_w)
        return round(watts * 1000)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:  # noqa: N802
        self._check("nvmlDeviceGetTemperature")
        return int(self._have(self._gpu(handle).temp_c))

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:  # noqa: N802
        self._check("nvmlDeviceGetPcieThroughput")
        gpu = self._gpu(handle)
        return int(self._have(gpu.pcie_tx_kb_per_s if counter == 0 else gpu.pcie_rx_kb_per_s))

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:  # noqa: N802
        self._check("nvmlDeviceGetMigMode")
        on = self._have(self._gpu(handle).mig_enabled)
        return [int(on), int(on)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetMaxMigDeviceCount")
        self._have(self._gpu(handle).mig_enabled)
        return _MIG_SLOTS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> tuple[int, int]:  # noqa: N802
        self._check("nvmlDeviceGetMigDeviceHandleByIndex")
        gpu = self._gpu(handle)
        if not any(m.index == index for m in gpu.migs):
            raise FakeNVMLError(choke.ERROR_NOT_FOUND)
        return (int(handle), index)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetGpuInstanceId")
        mig = self._mig(handle)
        if mig is None:
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetComputeInstanceId")
        mig = self._mig(handle)
        if mig is None:
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        return mig.compute_instance_id

    def _running(self, handle: Any, kinds: tuple[str, ...]) -> list[SimpleNamespace]:
        gpu, mig = self._gpu(handle), self._mig(handle)
        out = []
        for p in gpu.processes:
            if p.type not in kinds:
                continue
            if mig is not None and p.gpu_instance_id != mig.gpu_instance_id:
                continue
            out.append(
                SimpleNamespace(
                    pid=p.pid,
                    usedGpuMemory=None if p.used_mib is None else int(p.used_mib * MIB),
                    gpuInstanceId=choke_none(p.gpu_instance_id),
                    computeInstanceId=choke_none(p.compute_instance_id),
                )
            )
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:  # noqa: N802
        self._check("nvmlDeviceGetComputeRunningProcesses")
        return self._running(handle, ("compute", "both"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:  # noqa: N802
        self._check("nvmlDeviceGetGraphicsRunningProcesses")
        return self._running(handle, ("graphics", "both"))

    def nvmlDeviceGetProcessUtilization(self, handle: Any, since_us: int) -> list[SimpleNamespace]:  # noqa: N802
        self._check("nvmlDeviceGetProcessUtilization")
        node, gpu = self.node(), self._gpu(handle)
        if not node.process_util or self._mig(handle) is not None:
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        samples = [
            SimpleNamespace(
                pid=p.pid,
                timeStamp=node.util_time_us,
                smUtil=int(p.sm_util_pct),
                memUtil=int(p.mem_util_pct or 0),
                encUtil=0,
                decUtil=0,
            )
            for p in gpu.processes
            if p.sm_util_pct is not None and node.util_time_us > since_us
        ]
        if not samples:
            raise FakeNVMLError(choke.ERROR_NOT_FOUND)
        return samples

    # --- health ---------------------------------------------------------------------------

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int:  # noqa: N802
        self._check("nvmlDeviceGetTotalEccErrors")
        gpu = self._gpu(handle)
        if counter != 0:  # the captures hold the volatile totals only
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        return int(self._have(gpu.ecc_sbe if error_type == 0 else gpu.ecc_dbe))

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:  # noqa: N802
        self._check("nvmlDeviceGetRetiredPages")
        gpu = self._gpu(handle)
        count = int(self._have(gpu.retired_sbe_pages if cause == 0 else gpu.retired_dbe_pages))
        return [0x1000 * (i + 1) for i in range(count)]  # page addresses

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetRetiredPagesPendingStatus")
        return int(self._have(self._gpu(handle).retired_pending))

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:  # noqa: N802
        self._check("nvmlDeviceGetRemappedRows")
        corr, unc, pending, failure = self._have(self._gpu(handle).remapped_rows)
        return (corr, unc, int(pending), int(failure))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetCurrentClocksEventReasons")
        return int(self._have(self._gpu(handle).clocks_event_reasons))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons")
        return int(self._have(self._gpu(handle).clocks_event_reasons))

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetPcieReplayCounter")
        return int(self._have(self._gpu(handle).pcie_replays))

    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        self._check("nvmlEventSetCreate")
        with self._lock:
            self._event_sets.append(_EventSet())
            return self._event_sets[-1]

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:  # noqa: N802
        self._check("nvmlDeviceGetSupportedEventTypes")
        return EVENT_XID if self._gpu(handle).xid_events else 0

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: _EventSet) -> None:  # noqa: N802
        self._check("nvmlDeviceRegisterEvents")
        if not self._gpu(handle).xid_events:
            raise FakeNVMLError(choke.ERROR_NOT_SUPPORTED)
        event_set.devices.add(int(handle))

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:  # noqa: N802
        self._check("nvmlEventSetWait_v2")
        with self._lock:
            if not event_set.queue:
                raise FakeNVMLError(choke.ERROR_TIMEOUT)  # never waits: the tests run no clock
            return event_set.queue.pop(0)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:  # noqa: N802
        with self._lock:
            if event_set in self._event_sets:
                self._event_sets.remove(event_set)

    def inject_xid(self, index: int, code: int) -> None:
        """The driver reports Xid ``code`` on GPU ``index``: every set it is registered with gets it."""
        event = SimpleNamespace(
            device=index,
            eventType=EVENT_XID,
            eventData=code,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )
        with self._lock:
            for s in self._event_sets:
                if index in s.devices:
                    s.queue.append(event)


@dataclass
class _EventSet:
    devices: set[int] = field(default_factory=set)
    queue: list[SimpleNamespace] = field(default_factory=list)


def choke_none(value: int | None) -> int:
    """nvmlProcessInfo_t's "no instance" value for a process outside MIG."""
    return 0xFFFFFFFF if value is None else value
