"""GPU health through NVML: ECC totals, retired pages / remapped rows, slowdown, PCIe replays, Xids.

Every reading is ``None`` where the GPU cannot give it. A call a GPU answers "not supported"
or "no permission" is remembered per GPU and not made again, so a consumer board without
ECC costs one log line (the choke point's) and no calls after the first pass.

Xid events come from one ``nvmlEventSet`` created on first use, with each GPU registered
for ``nvmlEventTypeXidCriticalError`` when it supports it; each pass drains the set with a
zero timeout. A GPU that is registered reports the last Xid since the previous pass (0:
none); one that is not reports ``None``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpusteward.domain import health
from gpusteward.integrations.nvml.choke import (
    ERROR_NO_PERMISSION,
    ERROR_NOT_SUPPORTED,
    ERROR_TIMEOUT,
    UNSUPPORTED,
    Nvml,
    Result,
)

# nvml.h constants; stable across driver versions.
MEMORY_ERROR_CORRECTED = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
RETIRED_MULTIPLE_SBE = 0
RETIRED_DBE = 1
EVENT_XID = 0x0000000000000008  # nvmlEventTypeXidCriticalError
#: Events drained per pass at most: a GPU flooding Xids cannot stall the sampler.
MAX_EVENTS = 1000
#: The GPU will never answer these: stop asking.
_NEVER = UNSUPPORTED | {ERROR_NO_PERMISSION}


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """One GPU's health readings, named as ``Sample``'s fields. ``None``: not readable here."""

    xid_code: float | None = None
    xid_fatal: float | None = None
    ecc_dbe_count: float | None = None
    ecc_sbe_count: float | None = None
    retired_pages: float | None = None
    row_remap_failure: float | None = None
    throttled: float | None = None
    pcie_replay_count: float | None = None

    def fields(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def with_xid(self, code: int | None) -> GpuHealth:
        if code is None:
            return dataclasses.replace(self, xid_code=None, xid_fatal=None)
        return dataclasses.replace(self, xid_code=float(code), xid_fatal=float(health.xid_fatal(code)))


#: Nothing read (frozen, so one instance serves every reading).
NO_HEALTH = GpuHealth()


def _count(r: Result) -> float | None:
    return float(r.value) if r.ok and isinstance(r.value, int) else None


class HealthReader:
    """Per-GPU health calls and the node's Xid event set. Not thread-safe: the sampler's lock guards it."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self._never: set[tuple[str, str, tuple[Any, ...]]] = set()  # (GPU, function, args) not to retry
        self._events: Any = None
        self._events_failed = False
        self._registered: set[str] = set()  # GPU uuids whose Xids the set delivers
        self._tried: set[str] = set()  # GPU uuids registration was attempted for

    def _call(self, uuid: str, function: str, *args: Any) -> Result:
        key = (uuid, function, args[1:])  # args[0] is the handle, which may change
        if key in self._never:
            return Result(None, f"{function}: not available on this GPU", ERROR_NOT_SUPPORTED)
        r = self.nvml.call(function, *args)
        if not r.ok and r.code in _NEVER:
            self._never.add(key)
        return r

    def read(self, handle: Any, uuid: str) -> GpuHealth:
        """Everything but the Xid (``drain`` gives that, once per pass)."""
        call = self._call
        sbe = call(uuid, "nvmlDeviceGetTotalEccErrors", handle, MEMORY_ERROR_CORRECTED, VOLATILE_ECC)
        dbe = call(uuid, "nvmlDeviceGetTotalEccErrors", handle, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC)
        retired, failure = self._retirement(handle, uuid)
        reasons = call(uuid, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if not reasons.ok:  # pynvml before 12.535 and older drivers only know the old name
            reasons = call(uuid, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return GpuHealth(
            ecc_dbe_count=_count(dbe),
            ecc_sbe_count=_count(sbe),
            retired_pages=retired,
            row_remap_failure=failure,
            throttled=float(health.throttled(reasons.value)) if _count(reasons) is not None else None,
            pcie_replay_count=_count(call(uuid, "nvmlDeviceGetPcieReplayCounter", handle)),
        )

    def _retirement(self, handle: Any, uuid: str) -> tuple[float | None, float | None]:
        """(retired pages or remapped rows, 1 on a remap failure or a pending retirement)."""
        rows = self._call(uuid, "nvmlDeviceGetRemappedRows", handle)  # Ampere and newer
        if rows.ok and isinstance(rows.value, tuple) and len(rows.value) == 4:
            corr, unc, _pending, failed = rows.value
            return float(corr + unc), float(bool(failed))
        sbe = self._call(uuid, "nvmlDeviceGetRetiredPages", handle, RETIRED_MULTIPLE_SBE)
        dbe = self._call(uuid, "nvmlDeviceGetRetiredPages", handle, RETIRED_DBE)
        pages = float(len(sbe.value) + len(dbe.value)) if sbe.ok and dbe.ok else None
        pending = self._call(uuid, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return pages, (float(bool(pending.value)) if _count(pending) is not None else None)

    def register(self, handle: Any, uuid: str) -> None:
        """Ask for this GPU's Xids, once per GPU; a GPU that cannot deliver them stays ``None``."""
        if uuid in self._tried:
            return
        self._tried.add(uuid)
        if self._events is None and not self._events_failed:
            created = self.nvml.call("nvmlEventSetCreate")
            self._events, self._events_failed = created.value, not created.ok
        if self._events is None:
            return
        supported = self.nvml.call("nvmlDeviceGetSupportedEventTypes", handle)
        if supported.ok and isinstance(supported.value, int) and not supported.value & EVENT_XID:
            return
        if self.nvml.call("nvmlDeviceRegisterEvents", handle, EVENT_XID, self._events).ok:
            self._registered.add(uuid)

    def drain(self) -> dict[str, int | None]:
        """GPU uuid → the last Xid since the previous drain (0: none), ``None`` where unregistered."""
        out: dict[str, int | None] = dict.fromkeys(self._tried)
        out.update(dict.fromkeys(self._registered, 0))
        if self._events is None:
            return out
        for _ in range(MAX_EVENTS):
            r = self.nvml.call("nvmlEventSetWait_v2", self._events, 0, empty=frozenset({ERROR_TIMEOUT}))
            if not r.ok or r.value is None:
                break  # TIMEOUT: nothing more waiting
            event = r.value
            if not int(getattr(event, "eventType", 0)) & EVENT_XID:
                continue
            uuid = self.nvml.call("nvmlDeviceGetUUID", event.device)
            if uuid.ok and uuid.value in self._registered:
                out[str(uuid.value)] = int(event.eventData)
        return out

    def close(self) -> None:
        if self._events is not None:
            self.nvml.call("nvmlEventSetFree", self._events)
            self._events = None
