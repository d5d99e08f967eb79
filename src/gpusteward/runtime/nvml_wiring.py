"""``source: nvml`` → the node's ``NvmlSource`` and a ``ProcessExecutor`` that shares its NVML handle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpusteward.domain.ports import Clock
from gpusteward.execution.process import ProcessExecutor
from gpusteward.runtime.adapters import Adapters, no_history
from gpusteward.sensing.exporter import NodeCollector
from gpusteward.sensing.nvml.choke import Nvml
from gpusteward.sensing.nvml.sampler import NvmlSampler
from gpusteward.sensing.nvml.source import NvmlSource, node_name
from gpusteward.sensing.procfs import ProcReader

if TYPE_CHECKING:
    from gpusteward.runtime.config import Settings


def nvml_adapters(settings: Settings, clock: Clock, *, lib: Any | None = None) -> Adapters:
    """The source and its executor. ``lib`` replaces pynvml (the capture-replaying fake in tests).

    Raises ``SourceUnavailable`` (one line, suggesting ``sim`` or ``prometheus``) without a driver.
    """

    cfg = settings.source.nvml
    procs = ProcReader(cfg.proc_root)
    source = NvmlSource(Nvml(lib), cfg, procs=procs)
    executor = ProcessExecutor(
        node=source.node,
        procs=procs,
        holdings=source.sampler.holdings,
        grace_s=settings.policy.ladder.stop_grace_seconds,
        term_wait_s=cfg.term_wait_seconds,
        kill_wait_s=cfg.kill_wait_seconds,
        poll_s=cfg.poll_seconds,
        protected_users=[*cfg.protected_users, *settings.policy.protect.users],
        allow_root=cfg.allow_root,
        default_signal=cfg.checkpoint_signal,
        clock=clock,
    )
    return Adapters(source=source, executors=[executor], history=no_history)


def nvml_exporter(settings: Settings, *, lib: Any | None = None) -> NodeCollector:
    """The collector behind ``gpusteward exporter``: the same NVML and /proc reads as the source."""
    cfg = settings.source.nvml
    nvml = Nvml(lib)
    nvml.start()
    sampler = NvmlSampler(nvml, process_utilization=cfg.process_utilization)
    return NodeCollector(sampler, ProcReader(cfg.proc_root), node_name(cfg.node))
