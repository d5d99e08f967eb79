"""``source: replay`` → a ``ReplaySource`` over a trace file, and the executor that "stops" its workloads."""

from __future__ import annotations

import logging

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.integrations.replay.load import load_trace
from gpusteward.integrations.replay.pods import load_pod_list
from gpusteward.integrations.replay.queue_model import QueueModel
from gpusteward.integrations.replay.settings import ReplaySettings
from gpusteward.integrations.replay.source import ReplayExecutor, ReplaySource
from gpusteward.integrations.replay.trace import Trace

log = logging.getLogger(__name__)


def load_configured_trace(cfg: ReplaySettings, ctx: BuildContext) -> Trace:
    """The trace ``source.replay`` names, with its GPUs priced from ``cost``."""
    if cfg.trace is None:
        raise ConfigError("source.replay.trace: the replay source needs a trace file")
    trace = load_trace(cfg.trace, cfg.format, gpu_model=cfg.gpu_model)
    return trace.with_gpus(ctx.prices(trace.gpus))


def build(cfg: ReplaySettings, ctx: BuildContext) -> Integration:
    """With ``align: now`` the trace is shifted so that its first window fills the agent's window
    at start-up; with ``align: trace`` the clock must run on the trace's own times."""
    trace = load_configured_trace(cfg, ctx)
    if ctx.tick_s < trace.interval_s:
        log.warning(
            "the trace is sampled every %g s but the loop ticks every %g s: windows will look half "
            "empty and rules will not judge; set tick_seconds: %g",
            trace.interval_s,
            ctx.tick_s,
            trace.interval_s,
        )
    offset = 0.0
    if cfg.align == "now":
        offset = ctx.clock.now().timestamp() - (trace.start + ctx.window_s)
    source = ReplaySource(trace, offset_s=offset, default_class=cfg.default_class)
    queue = None
    if cfg.queue is not None:
        jobs = load_pod_list(cfg.queue, scale=cfg.queue_scale).jobs
        queue = QueueModel(trace, jobs, source.released_at, offset_s=offset, source_name=source.name).queue
    return Integration(
        name="replay",
        source=source,
        executors=[ReplayExecutor(source)],
        history=source.history,
        queue=queue,
    )
