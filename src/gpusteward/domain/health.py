"""GPU health vocabulary: what an Xid means, which clock-throttle reasons are a slowdown,
and the states a GPU can be in. Pure data; sources map raw readings through it and the
health rules (``analysis/rules/default.yaml``, ``action: repair``) read the metrics it fills.

The Xid meanings and immediate actions follow NVIDIA's Xid catalog
(docs.nvidia.com/deploy/xid-errors) and its page-retirement / row-remapping notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Health(StrEnum):
    """A GPU's health as gpusteward judges it; the order is worsening."""

    OK = "ok"
    #: Clocks held down by a thermal / hardware slowdown or power brake: slow, not broken.
    THROTTLED = "throttled"
    #: Still working but heading for failure (rising corrected errors, a row marked for
    #: remapping, a temperature trend): a prediction.
    DEGRADING = "degrading"
    #: Unusable until reset, reboot or service: its low utilisation is the fault's.
    FAILED = "failed"


class XidImpact(StrEnum):
    """Who an Xid is about."""

    #: The application's own fault (bad address, killed channel); the GPU is fine.
    APP = "app"
    #: The GPU still works but needs a reset at the next chance, or is wearing out.
    DEGRADING = "degrading"
    #: The GPU (or its link) is unusable until reset, reboot or repair.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    meaning: str
    impact: XidImpact
    #: What the operator should do, in NVIDIA's words where it gives them.
    action: str


#: The common Xids. An Xid not listed is reported with its code and treated as APP.
XIDS: dict[int, Xid] = {
    x.code: x
    for x in (
        Xid(
            13,
            "Graphics engine exception (often an out-of-range access in the job)",
            XidImpact.APP,
            "restart the application; check its code",
        ),
        Xid(
            31,
            "GPU memory page fault (an illegal address in the job)",
            XidImpact.APP,
            "restart the application; check its code",
        ),
        Xid(
            43,
            "GPU stopped processing the job's channel (the job faulted)",
            XidImpact.APP,
            "restart the application",
        ),
        Xid(
            45,
            "Preemptive cleanup after an earlier error (job killed or faulted)",
            XidImpact.APP,
            "none for the GPU; see the earlier Xid",
        ),
        Xid(
            48,
            "Double-bit (uncorrectable) ECC error",
            XidImpact.FAILED,
            "drain the node, reset the GPU; replace if it repeats",
        ),
        Xid(
            63,
            "ECC page retirement / row remapping recorded: reset to activate",
            XidImpact.DEGRADING,
            "reset the GPU when idle",
        ),
        Xid(
            64,
            "ECC page retirement / row remapping failed",
            XidImpact.FAILED,
            "drain the node; the GPU needs service",
        ),
        Xid(74, "NVLink error", XidImpact.FAILED, "drain the node, reset the GPU; check the link"),
        Xid(
            79,
            "GPU has fallen off the bus",
            XidImpact.FAILED,
            "drain the node, reboot; check power and seating",
        ),
        Xid(92, "High single-bit ECC error rate", XidImpact.DEGRADING, "watch; reset the GPU when idle"),
        Xid(
            94,
            "Contained ECC error (the job was killed, the GPU keeps running)",
            XidImpact.DEGRADING,
            "restart the application; reset the GPU when idle",
        ),
        Xid(95, "Uncontained ECC error", XidImpact.FAILED, "drain the node, reset the GPU"),
        Xid(119, "GSP RPC timeout", XidImpact.FAILED, "drain the node, reset the GPU"),
        Xid(120, "GSP error", XidImpact.FAILED, "drain the node, reset the GPU"),
        Xid(
            154,
            "GPU recovery action changed (reset or reboot required)",
            XidImpact.FAILED,
            "drain the node; do the recovery action the driver names",
        ),
    )
}


def xid_fatal(code: int) -> bool:
    """Whether an Xid means the GPU itself failed (``Metric.XID_FATAL``)."""
    x = XIDS.get(code)
    return x is not None and x.impact is XidImpact.FAILED


#: NVML clocks-event (throttle) reason bits that mean a slowdown, not a choice:
#: SW power cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80.
#: GPU idle 0x1, application clocks 0x2 and sync boost 0x10 are not slowdowns.
SLOWDOWN_REASONS = 0x8 | 0x20 | 0x40 | 0x80


def throttled(reasons_bitmask: int) -> bool:
    """``Metric.THROTTLED`` from NVML's / DCGM's clocks-throttle-reasons bitmask."""
    return bool(reasons_bitmask & SLOWDOWN_REASONS)
