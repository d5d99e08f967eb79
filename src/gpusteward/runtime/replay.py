"""``source: replay`` → a ``ReplaySource`` over a trace file, and the executor that "stops" its workloads."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.ports import Clock
from gpusteward.runtime.adapters import Adapters
from gpusteward.sensing.replay import ReplayExecutor, ReplaySource, Trace, load_trace

if TYPE_CHECKING:
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)


def load_configured_trace(settings: Settings) -> Trace:
    """The trace ``source.replay`` names, with its GPUs priced from ``cost``."""
    cfg = settings.source.replay
    if cfg.trace is None:
        raise ConfigError("source.replay.trace: the replay source needs a trace file")
    trace = load_trace(cfg.trace, cfg.format, gpu_model=cfg.gpu_model)
    return trace.with_gpus(settings.cost.with_prices(trace.gpus))


def replay_adapters(settings: Settings, clock: Clock) -> Adapters:
    """With ``align: now`` the trace is shifted so that its first window fills the agent's window
    at start-up; with ``align: trace`` the clock must run on the trace's own times."""

    trace = load_configured_trace(settings)
    if settings.tick_seconds < trace.interval_s:
        log.warning(
            "the trace is sampled every %g s but the loop ticks every %g s: windows will look half "
            "empty and rules will not judge; set tick_seconds: %g",
            trace.interval_s,
            settings.tick_seconds,
            trace.interval_s,
        )
    offset = 0.0
    if settings.source.replay.align == "now":
        offset = clock.now().timestamp() - (trace.start + settings.store.window_minutes * 60)
    source = ReplaySource(trace, offset_s=offset)
    return Adapters(source=source, executors=[ReplayExecutor(source)], history=source.history)
