"""Render per-GPU modes into metric values, vectorised over all GPUs at once.

Noise comes from a counter-based hash of (per-GPU key, second, channel) rather than
from a stateful generator, so a GPU's value at a given second is the same however
often, or in whatever order, the cluster is observed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.integrations.sim.behaviours import Mode

F64 = npt.NDArray[np.float64]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

#: Uniform noise channels drawn per GPU per observation.
N_CHANNELS = 8
_CH_UTIL, _CH_MEM, _CH_POWER, _CH_TEMP, _CH_SM, _CH_CPU, _CH_PCIE, _CH_DROP = range(N_CHANNELS)

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def hash_uniform(keys: U64, second: int) -> F64:
    """Uniform [0, 1) values, shape (len(keys), N_CHANNELS), a pure function of the inputs."""
    counter = np.uint64(second * N_CHANNELS) + np.arange(N_CHANNELS, dtype=np.uint64)
    x: U64 = keys[:, None] * _GOLDEN + counter
    # splitmix64 finaliser: uint64 arithmetic wraps, which is what a hash wants.
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    x = x ^ (x >> np.uint64(31))
    top: U64 = x >> np.uint64(11)
    out: F64 = top.astype(np.float64) * (1.0 / (1 << 53))
    return out


def _table(values: dict[Mode, float]) -> F64:
    return np.array([values.get(m, 0.0) for m in Mode], dtype=np.float64)


# Per-mode GPU utilisation: low end and span of a uniform draw (BUSY, BURST and
# INFERENCE are overridden by per-workload levels below).
_UTIL_LO = _table({Mode.DATA_DIP: 3.0})
_UTIL_SPAN = _table({Mode.DATA_DIP: 22.0, Mode.IDLE_HOLD: 2.0})
# Per-mode CPU of the holding process, percent of one core.
_CPU_LO = _table(
    {
        Mode.BUSY: 80.0,
        Mode.DATA_DIP: 250.0,
        Mode.CHECKPOINT: 100.0,
        Mode.LOADING: 100.0,
        Mode.INFERENCE: 25.0,
        Mode.BURST: 20.0,
        Mode.SERVE_BURST: 30.0,
        Mode.SERVE_IDLE: 2.0,
    }
)
_CPU_SPAN = _table(
    {
        Mode.BUSY: 80.0,
        Mode.DATA_DIP: 150.0,
        Mode.CHECKPOINT: 150.0,
        Mode.LOADING: 100.0,
        Mode.INFERENCE: 40.0,
        Mode.BURST: 80.0,
        Mode.IDLE_HOLD: 1.0,
        Mode.SERVE_BURST: 40.0,
        Mode.SERVE_IDLE: 3.0,
    }
)
# Host-to-device (rx) and device-to-host (tx) traffic, bytes/s.
_RX = _table(
    {
        Mode.BUSY: 1.5e9,
        Mode.DATA_DIP: 5e9,
        Mode.CHECKPOINT: 1e8,
        Mode.LOADING: 4e9,
        Mode.INFERENCE: 4e8,
        Mode.BURST: 5e8,
        Mode.SERVE_BURST: 3e8,
    }
)
_TX = _table({Mode.BUSY: 2e8, Mode.DATA_DIP: 5e7, Mode.CHECKPOINT: 6e9, Mode.INFERENCE: 3e8, Mode.BURST: 1e8})
# Power above what utilisation explains (copy engines, memory traffic).
_POWER_EXTRA = _table({Mode.CHECKPOINT: 30.0, Mode.LOADING: 20.0, Mode.DATA_DIP: 15.0})
_HOLDS_MEMORY = np.array(
    [m not in (Mode.IDLE_EMPTY, Mode.FREE) for m in Mode],
    dtype=bool,
)

IDLE_POWER_W = 58.0
WATTS_PER_UTIL = 3.0


@dataclass(frozen=True, slots=True)
class Metrics:
    """One value per GPU per metric; ``dropped`` marks samples the source failed to read."""

    util: F64
    mem: F64
    power: F64
    temp: F64
    sm: F64
    cpu: F64
    rx: F64
    tx: F64
    dropped: npt.NDArray[np.bool_]


def diurnal(hour_of_day: float, peak: F64, trough: float = 15.0) -> F64:
    """Inference load: ``trough`` at 03:00, ``peak`` at 15:00."""
    shape = 0.5 + 0.5 * math.cos(2.0 * math.pi * (hour_of_day - 15.0) / 24.0)
    return trough + (peak - trough) * shape


def render(
    *,
    modes: I64,
    frac: F64,
    util_base: F64,
    mem_mib: F64,
    keys: U64,
    second: int,
    hour_of_day: float,
    drop_rate: float,
) -> Metrics:
    """Metric values for every GPU. ``mem_mib`` is what each GPU's holder keeps resident."""
    u = hash_uniform(keys, second)
    util = _UTIL_LO[modes] + u[:, _CH_UTIL] * _UTIL_SPAN[modes]
    centred = u[:, _CH_UTIL] - 0.5
    util = np.where(modes == Mode.BUSY, util_base + centred * 16.0, util)
    util = np.where(modes == Mode.BURST, util_base + centred * 70.0, util)
    inference = diurnal(hour_of_day, util_base) + centred * 6.0
    util = np.where(modes == Mode.INFERENCE, inference, util)
    util = np.where(modes == Mode.SERVE_BURST, np.maximum(util_base + centred * 10.0, 1.0), util)
    util = np.clip(util, 0.0, 100.0).round(0)

    held = _HOLDS_MEMORY[modes]
    # A loading model's memory grows from a CUDA context to its full size.
    growth = np.where(modes == Mode.LOADING, 0.02 + 0.98 * frac, 1.0)
    mem = np.where(held, mem_mib * growth + (u[:, _CH_MEM] - 0.5) * 16.0, 0.0)
    mem = np.maximum(mem, 0.0).round(0)

    power = IDLE_POWER_W + util * WATTS_PER_UTIL + _POWER_EXTRA[modes] + u[:, _CH_POWER] * 6.0
    power = power.round(1)
    temp = (26.0 + 0.12 * power + u[:, _CH_TEMP] * 2.0).round(0)
    sm = np.clip(util * (0.75 + 0.15 * u[:, _CH_SM]), 0.0, 100.0).round(1)
    cpu = (_CPU_LO[modes] + u[:, _CH_CPU] * _CPU_SPAN[modes]).round(1)
    scale = 0.8 + 0.4 * u[:, _CH_PCIE]
    return Metrics(
        util=util,
        mem=mem,
        power=power,
        temp=temp,
        sm=sm,
        cpu=cpu,
        rx=(_RX[modes] * scale).round(0),
        tx=(_TX[modes] * scale).round(0),
        dropped=u[:, _CH_DROP] < drop_rate,
    )
