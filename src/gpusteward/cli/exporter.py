"""``gpusteward exporter``: this node's per-GPU and per-process metrics for Prometheus."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from gpusteward.cli import logsetup
from gpusteward.cli.exits import err, exit_on_errors
from gpusteward.integrations.nvml.build import node_collector
from gpusteward.integrations.nvml.exporter import serve
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.driver import StopFlag


def exporter(
    port: Annotated[int, typer.Option(help="TCP port to serve /metrics on.")] = 9835,
    address: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")
    ] = "0.0.0.0",  # noqa: S104
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="Config file; the source.nvml section (proc_root, node) is used."
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log NVML functions found missing.")
    ] = False,
) -> None:
    """Serve per-GPU and per-process GPU metrics of this node (NVML + /proc) in Prometheus format.

    Every process on every GPU is labelled with its pid, user, container, pod, namespace and
    Slurm job; a metric NVML cannot read on this GPU is left out, never reported as 0. Needs an
    NVIDIA driver and nvidia-ml-py (the nvml extra). SIGTERM or Ctrl-C stops it.
    """
    with exit_on_errors():
        settings = load_settings(config)
        logsetup.apply(settings, verbose=verbose)
        collector = node_collector(settings.source.nvml)
    server, _ = serve(collector, port, address)
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, stop.set)
    err.print(
        f"gpusteward exporter: http://{address}:{port}/metrics (node {collector.node})", highlight=False
    )
    while not stop.wait(3600):
        pass
    server.shutdown()
    collector.sampler.nvml.stop()
