"""Ground-truth behaviours of simulated workloads, as piecewise schedules of modes.

A ``Plan`` is drawn once per workload from that workload's own random generator and is
relative to the workload's start, so its trace does not depend on when (or how often)
it is observed, nor on how long it waited in the queue. Rendering a mode into metric
values is ``signals.py``'s job.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from enum import IntEnum, StrEnum

import numpy as np

MINUTE_S = 60.0
HOUR_S = 3600.0


class Behaviour(StrEnum):
    """What a workload really does (the ground truth the agent must discover)."""

    TRAINING = "training"
    LOADING = "loading"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    ZOMBIE = "zombie"
    OVERPROVISIONED = "overprovisioned"
    IDLE = "idle"
    #: A model server answering requests in short bursts; with a quiet evening, or bursty all day.
    SERVING = "serving"


class Mode(IntEnum):
    """What one GPU is doing at one moment; ``signals.py`` turns it into metrics."""

    BUSY = 0  # training compute
    DATA_DIP = 1  # short stall waiting for the data loader
    CHECKPOINT = 2  # writing a checkpoint: GPU idle, CPU and PCIe busy
    LOADING = 3  # loading a model: GPU idle, memory growing, CPU busy
    INFERENCE = 4  # serving: day/night load cycle
    BURST = 5  # interactive use of a notebook
    IDLE_HOLD = 6  # idle, holding memory, process alive (notebook between/after bursts)
    DEAD = 7  # crashed process still holding memory: nothing moves
    IDLE_EMPTY = 8  # allocated but unused: no memory, no process activity
    FREE = 9  # no holder
    SERVE_BURST = 10  # a server answering a burst of requests
    SERVE_IDLE = 11  # a server waiting for requests: 0 %, model resident, its event loop ticking


#: Behaviours whose process writes a checkpoint and exits when asked (others ignore the signal).
CHECKPOINTS = frozenset({Behaviour.TRAINING, Behaviour.LOADING, Behaviour.OVERPROVISIONED})


@dataclass(frozen=True, slots=True)
class Plan:
    """One workload's schedule, in seconds since it started."""

    behaviour: Behaviour
    #: Segment start offsets (the first is 0) and the mode of each segment.
    starts_s: tuple[float, ...]
    modes: tuple[Mode, ...]
    #: How long it would run if nobody stopped it.
    run_s: float
    #: When it stops doing useful work (None: productive throughout).
    wasteful_from_s: float | None
    #: Per-workload level: mean util when busy, or the afternoon peak for inference.
    util_base: float
    #: Share of the GPU's memory it holds on each GPU it uses.
    mem_frac: float
    #: How many of its GPUs it uses; the rest sit idle with no memory (over-provisioning).
    active_gpus: int

    def segment(self, offset_s: float) -> int:
        return max(bisect_right(self.starts_s, offset_s) - 1, 0)

    def mode_at(self, offset_s: float) -> tuple[Mode, float]:
        """The mode at ``offset_s`` and how far (0..1) into its segment we are."""
        i = self.segment(offset_s)
        start = self.starts_s[i]
        end = self.starts_s[i + 1] if i + 1 < len(self.starts_s) else self.run_s
        span = end - start
        frac = (offset_s - start) / span if span > 0 else 1.0
        return self.modes[i], min(max(frac, 0.0), 1.0)

    def phases(self) -> tuple[tuple[float, float, Mode], ...]:
        """(start_s, end_s, mode) of every segment that begins before the planned end."""
        ends = (*self.starts_s[1:], self.run_s)
        return tuple(
            (s, min(e, self.run_s), m)
            for s, e, m in zip(self.starts_s, ends, self.modes, strict=True)
            if s < self.run_s
        )

    def productive_at(self, offset_s: float) -> bool:
        """Ground truth over the planned life (stops by the agent do not change it)."""
        if offset_s < 0 or offset_s >= self.run_s:
            return False
        return self.wasteful_from_s is None or offset_s < self.wasteful_from_s


class _Builder:
    """Appends segments, dropping any that would start at or after a cut-off."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.modes: list[Mode] = []

    def add(self, at_s: float, mode: Mode) -> None:
        if self.modes and self.modes[-1] is mode:
            return
        self.starts.append(at_s)
        self.modes.append(mode)

    def cut(self, at_s: float) -> None:
        while self.starts and self.starts[-1] >= at_s:
            self.starts.pop()
            self.modes.pop()


def _uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _training(rng: np.random.Generator, b: _Builder, t0: float, t1: float) -> None:
    """Busy, with a checkpoint every 30-90 min (2-5 min, GPU at 0 %) and data-loader
    stalls of 20-60 s every 8-20 min."""
    t = t0
    next_ckpt = t + _uniform(rng, 30, 90) * MINUTE_S
    while t < t1:
        b.add(t, Mode.BUSY)
        dip_at = t + _uniform(rng, 8, 20) * MINUTE_S
        if dip_at < next_ckpt:
            b.add(dip_at, Mode.DATA_DIP)
            t = dip_at + _uniform(rng, 20, 60)
        else:
            b.add(next_ckpt, Mode.CHECKPOINT)
            t = next_ckpt + _uniform(rng, 2, 5) * MINUTE_S
            next_ckpt = t + _uniform(rng, 30, 90) * MINUTE_S
    b.cut(t1)


def _notebook(rng: np.random.Generator, b: _Builder, active_s: float) -> None:
    """Bursts of 20-60 min with short pauses, ending with a burst at ``active_s``."""
    t = 0.0
    while t < active_s:
        b.add(t, Mode.BURST)
        t += _uniform(rng, 20, 60) * MINUTE_S
        if t + 25 * MINUTE_S >= active_s:
            break
        b.add(t, Mode.IDLE_HOLD)
        t += _uniform(rng, 5, 15) * MINUTE_S
    b.cut(active_s)


# Serving, from the GenTD26 dev trace (72 Stable Diffusion pods, 22.8 h, one sample / 57 s;
# tests/fixtures/traces/, measured once with numpy): in the day, busy runs (util >= 1 %) last
# 2 min at the median (p90 7.7) and the gaps between them 1.9 min (p90 7.6, p99 29.5); busy
# samples read 12-27 % (p25-p75). The day's traffic ends 15.4-17.4 h after the trace starts (p10
# to p75 of the hindsight oracle's stop), after which a stray request lands ~1.5 times an hour
# (median). 11 of 72 pods never go quiet: 30-60 % bursts of ~10 min about every hour.
SERVE_BURST_MEDIAN_MIN = 2.0
SERVE_GAP_MEDIAN_MIN = 1.9
SERVE_GAP_MAX_MIN = 30.0
SERVE_LEVEL = (12.0, 27.0)
SERVE_DRIZZLE_PER_H = 1.5


def _lognormal_min(rng: np.random.Generator, median: float, hi: float) -> float:
    """Minutes, heavy-tailed around ``median`` (sigma 0.9 puts p90 at ~3.2 x the median), 1..hi."""
    return float(np.clip(median * np.exp(0.9 * rng.standard_normal()), 1.0, hi)) * MINUTE_S


def _serving(rng: np.random.Generator, b: _Builder, quiet_s: float | None, run_s: float) -> None:
    """Bursts and gaps until ``quiet_s`` (None: bursty all its life), then a stray request now and then."""
    t = 0.0
    if quiet_s is None:  # the bursty kind: ~10-min bursts about every hour, to the end
        while t < run_s:
            b.add(t, Mode.SERVE_BURST)
            t += _uniform(rng, 5, 15) * MINUTE_S
            b.add(t, Mode.SERVE_IDLE)
            t += _uniform(rng, 35, 65) * MINUTE_S
        b.cut(run_s)
        return
    while t < quiet_s:
        b.add(t, Mode.SERVE_BURST)
        t += _lognormal_min(rng, SERVE_BURST_MEDIAN_MIN, 15.0)
        b.add(t, Mode.SERVE_IDLE)
        t += _lognormal_min(rng, SERVE_GAP_MEDIAN_MIN, SERVE_GAP_MAX_MIN)
    b.cut(quiet_s)
    b.add(quiet_s, Mode.SERVE_IDLE)
    t = quiet_s + rng.exponential(HOUR_S / SERVE_DRIZZLE_PER_H)
    while t < run_s:  # one-minute stray requests
        b.add(t, Mode.SERVE_BURST)
        b.add(t + MINUTE_S, Mode.SERVE_IDLE)
        t += MINUTE_S + rng.exponential(HOUR_S / SERVE_DRIZZLE_PER_H)
    b.cut(run_s)


def make_plan(
    behaviour: Behaviour,
    rng: np.random.Generator,
    *,
    run_s: float,
    waste_after_s: float,
    gpus: int,
) -> Plan:
    """Draw one workload's schedule.

    ``waste_after_s`` is the crash time of a zombie and the end of a notebook's active
    span (when its long idle begins); other behaviours ignore it.
    """
    b = _Builder()
    wasteful_from: float | None = None
    util_base = _uniform(rng, 78, 92)
    mem_frac = _uniform(rng, 0.55, 0.92)
    active = gpus
    if behaviour is Behaviour.TRAINING:
        _training(rng, b, 0.0, run_s)
    elif behaviour is Behaviour.OVERPROVISIONED:
        _training(rng, b, 0.0, run_s)
        active = max(1, gpus // 4)
    elif behaviour is Behaviour.LOADING:
        load_s = _uniform(rng, 5, 15) * MINUTE_S
        b.add(0.0, Mode.LOADING)
        if rng.random() < 0.5:
            _training(rng, b, load_s, run_s)
        else:
            b.add(load_s, Mode.INFERENCE)
            util_base = _uniform(rng, 55, 72)
            mem_frac = _uniform(rng, 0.2, 0.5)
    elif behaviour is Behaviour.INFERENCE:
        b.add(0.0, Mode.INFERENCE)
        util_base = _uniform(rng, 55, 72)
        mem_frac = _uniform(rng, 0.2, 0.5)
    elif behaviour is Behaviour.SERVING:
        # waste_after_s is when the day's traffic ends; 0: it never does (the bursty kind).
        quiet = waste_after_s if waste_after_s > 0 else None
        _serving(rng, b, quiet, run_s)
        wasteful_from = quiet
        util_base = _uniform(rng, *SERVE_LEVEL) if quiet is not None else _uniform(rng, 30, 60)
        mem_frac = _uniform(rng, 0.2, 0.5)
    elif behaviour is Behaviour.NOTEBOOK:
        _notebook(rng, b, waste_after_s)
        b.add(waste_after_s, Mode.IDLE_HOLD)
        wasteful_from = waste_after_s
        util_base = _uniform(rng, 35, 65)
        mem_frac = _uniform(rng, 0.1, 0.5)
    elif behaviour is Behaviour.ZOMBIE:
        _training(rng, b, 0.0, waste_after_s)
        b.add(waste_after_s, Mode.DEAD)
        wasteful_from = waste_after_s
    else:  # IDLE
        b.add(0.0, Mode.IDLE_EMPTY)
        wasteful_from = 0.0
        mem_frac = 0.0
    if not b.starts:  # e.g. a zombie that crashed at once
        b.add(0.0, Mode.DEAD)
    return Plan(
        behaviour=behaviour,
        starts_s=tuple(b.starts),
        modes=tuple(b.modes),
        run_s=run_s,
        wasteful_from_s=wasteful_from,
        util_base=util_base,
        mem_frac=mem_frac,
        active_gpus=active,
    )
