"""``source: nvml`` → the node's ``NvmlSource`` and a ``ProcessExecutor`` that shares its NVML handle."""

from __future__ import annotations

from typing import Any

from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.executor import ProcessExecutor
from gpusteward.integrations.nvml.exporter import NodeCollector
from gpusteward.integrations.nvml.node_control import FlagFileNodeControl
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.sampler import NvmlSampler
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import NvmlSource, node_name


def build(cfg: NvmlSourceSettings, ctx: BuildContext, *, lib: Any | None = None) -> Integration:
    """The source and its executor. ``lib`` replaces pynvml (the capture-replaying fake in tests).

    Raises ``SourceUnavailable`` (one line, suggesting ``sim`` or ``prometheus``) without a driver.
    """
    procs = ProcReader(cfg.proc_root)
    source = NvmlSource(Nvml(lib), cfg, procs=procs)
    executor = ProcessExecutor(
        node=source.node,
        procs=procs,
        holdings=source.sampler.holdings,
        grace_s=ctx.stop_grace_s,
        term_wait_s=cfg.term_wait_seconds,
        kill_wait_s=cfg.kill_wait_seconds,
        poll_s=cfg.poll_seconds,
        protected_users=[*cfg.protected_users, *ctx.protected_users],
        allow_root=cfg.allow_root,
        default_signal=cfg.checkpoint_signal,
        clock=ctx.clock,
    )
    flags = FlagFileNodeControl(cfg.flag_dir, (source.node,)) if cfg.flag_dir is not None else None
    return Integration(name="nvml", source=source, executors=[executor], node_control=flags)


def node_collector(cfg: NvmlSourceSettings, *, lib: Any | None = None) -> NodeCollector:
    """The collector behind ``gpusteward exporter``: the same NVML and /proc reads as the source."""
    nvml = Nvml(lib)
    nvml.start()
    sampler = NvmlSampler(nvml, process_utilization=cfg.process_utilization)
    return NodeCollector(sampler, ProcReader(cfg.proc_root), node_name(cfg.node))
