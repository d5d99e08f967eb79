"""Failing and throttling GPUs in the simulator (issue 16).

A few GPUs, drawn from the seed, wear out the way NVIDIA's Xid catalog describes: corrected
(single-bit) ECC errors, and on some PCIe replays, climb faster and faster for hours; an Xid 92
(high single-bit rate) or 63 (a row remapped) comes as a precursor; then an Xid 48 (double-bit
ECC) or 79 (fallen off the bus), after which the GPU does no work: the job on it hangs, holding
its memory at 0 %, until its walltime, and the scheduler places nothing new on it (the device
plugin / node health check withdraws it). A couple of healthy GPUs throttle thermally for a while.
Every other GPU reads its health counters as 0: the simulator can read them all.

Everything is a function of the seed and of the time, never of how often it is observed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.domain.health import xid_fatal

F64 = npt.NDArray[np.float64]
HOUR_S = 3600.0
#: An Xid event shows in the samples this long after it happened (the exporter reports the
#: last Xid for a while), so a precursor is seen whatever the tick.
XID_SHOWN_S = 300.0
#: Temperature a thermally throttled GPU reads at least (HW slowdown starts about here).
THROTTLE_TEMP_C = 88.0


@dataclass(frozen=True, slots=True)
class Fault:
    """One GPU's way to failure, in seconds since the cluster's start."""

    gpu: int
    #: When its corrected errors start to climb.
    degrade_s: float
    precursor_s: float
    #: 92 (high single-bit ECC rate) or 63 (row remapped).
    precursor_xid: int
    fail_s: float
    #: 48 (double-bit ECC) or 79 (fallen off the bus).
    xid: int
    #: PCIe replays climb too (the bus was going).
    replays: bool
    #: Corrected errors per hour squared: the count grows quadratically, its rate linearly.
    growth: float


@dataclass(frozen=True, slots=True)
class Throttle:
    """A thermal slowdown episode of a healthy GPU."""

    gpu: int
    from_s: float
    to_s: float


def draw(
    seed: int, n_gpus: int, failing: int, throttling: int
) -> tuple[tuple[Fault, ...], tuple[Throttle, ...]]:
    """The failing and throttling GPUs of a cluster: failures 6-20 h after its start, each
    degrading for 3-6 h before it, its precursor 0.5-1.5 h before it."""
    rng = np.random.default_rng([seed, 16])
    picks = [int(i) for i in rng.choice(n_gpus, size=min(n_gpus, failing + throttling), replace=False)]
    faults = []
    for gpu in picks[:failing]:
        fail_s = round(rng.uniform(6.0, 20.0) * HOUR_S)
        replays = bool(rng.random() < 0.5)
        faults.append(
            Fault(
                gpu=gpu,
                degrade_s=fail_s - round(rng.uniform(3.0, 6.0) * HOUR_S),
                precursor_s=fail_s - round(rng.uniform(0.5, 1.5) * HOUR_S),
                precursor_xid=92 if rng.random() < 0.5 else 63,
                fail_s=fail_s,
                # A failing bus ends with the GPU falling off it; ECC wear with a double-bit error.
                xid=79 if replays else 48,
                replays=replays,
                growth=float(rng.uniform(20.0, 60.0)),
            )
        )
    throttles = []
    for gpu in picks[failing:]:
        start = round(rng.uniform(2.0, 20.0) * HOUR_S)
        throttles.append(Throttle(gpu, start, start + round(rng.uniform(20.0, 60.0) * 60.0)))
    return tuple(faults), tuple(throttles)


@dataclass(frozen=True, slots=True)
class Readings:
    """Health fields of every GPU at one time (``Sample``'s names), plus a temperature floor."""

    xid_code: F64
    xid_fatal: F64
    ecc_dbe_count: F64
    ecc_sbe_count: F64
    retired_pages: F64
    row_remap_failure: F64
    throttled: F64
    pcie_replay_count: F64
    #: A throttled GPU reads at least this hot (NaN: no floor).
    temp_floor: F64


class HealthModel:
    """What the health counters of ``n_gpus`` GPUs read at a given time."""

    def __init__(self, n_gpus: int, faults: tuple[Fault, ...], throttles: tuple[Throttle, ...]) -> None:
        self.n = n_gpus
        self.faults = faults
        self.throttles = throttles
        #: When each GPU fails (inf: never).
        self.fail_s = np.full(n_gpus, np.inf)
        for f in faults:
            self.fail_s[f.gpu] = f.fail_s

    def failed(self, i: int, t: float) -> bool:
        return bool(self.fail_s[i] <= t)

    def read(self, t: float) -> Readings:
        z = np.zeros(self.n)
        xid, fatal, dbe, sbe, retired, replay, throttled = (z.copy() for _ in range(7))
        temp_floor = np.full(self.n, np.nan)
        for f in self.faults:
            # Counters stop where they were when the GPU failed (nothing more is counted).
            h = max(0.0, min(t, f.fail_s) - f.degrade_s) / HOUR_S
            count = np.floor(2.0 * h + f.growth * h * h)
            sbe[f.gpu] = count
            if f.replays:
                replay[f.gpu] = 3.0 * count
            if f.precursor_xid == 63 and t >= f.precursor_s:
                retired[f.gpu] = 1.0
            if t >= f.fail_s:
                # A failed GPU fails every access: its fatal Xid keeps being reported.
                xid[f.gpu] = f.xid
                dbe[f.gpu] = 1.0 if f.xid == 48 else 0.0
            elif f.precursor_s <= t < f.precursor_s + XID_SHOWN_S:
                xid[f.gpu] = f.precursor_xid
            fatal[f.gpu] = float(xid_fatal(int(xid[f.gpu])))
        for th in self.throttles:
            if th.from_s <= t < th.to_s:
                throttled[th.gpu] = 1.0
                temp_floor[th.gpu] = THROTTLE_TEMP_C
        return Readings(xid, fatal, dbe, sbe, retired, z, throttled, replay, temp_floor)
