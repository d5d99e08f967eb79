"""Serving /metrics and the Alertmanager receiver on a background thread during ``run``.

uvicorn runs in a daemon thread (it installs no signal handlers off the main thread), so
SIGTERM still reaches the loop, which finishes its tick; then the server is told to exit.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.prometheus.parse import LabelMap
from gpusteward.runtime import collector
from gpusteward.runtime.config import Settings
from gpusteward.runtime.driver import StopFlag, Wake, run_forever
from gpusteward.runtime.logs import configured
from gpusteward.runtime.loop import Steward
from gpusteward.web.metrics import StewardMetrics
from gpusteward.web.settings import parse_listen

log = logging.getLogger(__name__)


#: Seconds requests may still run after SIGTERM before they are cancelled (``web.shutdown_grace_seconds``).
DEFAULT_GRACE_S = 10


def _server(app: object, host: str, port: int, *, log_level: str, grace_s: int) -> Any:
    import uvicorn  # only when serving: every other command starts faster without it

    # Without a graceful-shutdown timeout uvicorn waits for every open request after SIGTERM,
    # so one long request (a rule preview churning on a hostile pack) kept `serve` running.
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=grace_s,
        # The CLI configured the root logger (plain or JSON): uvicorn's lines go through it too.
        log_config=None if configured() else uvicorn.config.LOGGING_CONFIG,
    )
    return uvicorn.Server(config)


def serve_app(app: object, host: str, port: int, *, log_level: str = "warning", grace_s: int) -> None:
    """Serve ``app`` in the foreground until SIGTERM or SIGINT; requests still running
    ``grace_s`` seconds after the signal are cancelled and the process exits."""
    server = _server(app, host, port, log_level=log_level, grace_s=grace_s)
    # A findings page makes some 100,000 short-lived objects; without the start-up heap frozen,
    # the collections they trigger scanned it all again (a fifth of such a request's time).
    with collector.settled():
        server.run()


class BackgroundServer:
    """uvicorn serving ``app`` on ``host:port`` in a daemon thread."""

    def __init__(self, app: object, host: str, port: int, *, grace_s: int = DEFAULT_GRACE_S) -> None:
        self.server = _server(app, host, port, log_level="warning", grace_s=grace_s)
        self.config = self.server.config
        self.thread = threading.Thread(target=self.server.run, name="gpusteward-http", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        servers = getattr(self.server, "servers", [])
        for s in servers:
            for sock in s.sockets:
                return int(sock.getsockname()[1])
        return int(self.config.port)

    def start(self, timeout_s: float = 10.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                where = f"{self.config.host}:{self.config.port}"
                raise ConfigError(f"cannot serve on {where} (in use or not allowed)")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def run_with_server(
    steward: Steward,
    settings: Settings,
    stop: StopFlag,
    *,
    listen: str | None = None,
    max_ticks: int | None = None,
    labels: LabelMap | None = None,
    web: Callable[[Steward, Any], Any] | None = None,
) -> int:
    """``run_forever`` with /metrics and the receiver on ``listen`` (or ``server.listen``).

    ``web(steward, app)`` returns the app to serve instead (``run --web``: the web admin with
    this app mounted under it); it serves on ``web.listen`` when no other address is given."""
    cfg = settings.server
    where = listen or cfg.listen or (settings.web.listen if web is not None else None)
    metrics = StewardMetrics()
    wake = Wake()
    server = None
    if where:
        try:
            host, port = parse_listen(where)
        except ValueError as e:
            raise ConfigError(f"--listen: {e}") from e
        from gpusteward.web.ops import create_app  # FastAPI only when serving

        pcfg = settings.source.prometheus
        app = create_app(
            metrics,
            wake,
            token=cfg.alertmanager_token.get_secret_value() if cfg.alertmanager_token else None,
            labels=labels or LabelMap().with_overrides(pcfg.labels),
            ignore_pods=re.compile(pcfg.exporter_pod_regex) if pcfg.exporter_pod_regex else None,
            max_body_bytes=cfg.max_body_bytes,
            open_to_anyone=cfg.alertmanager_open,
            min_wake_interval_s=cfg.alertmanager_min_wake_seconds,
        )
        if web is not None:
            app = web(steward, app)
        server = BackgroundServer(app, host, port, grace_s=settings.web.shutdown_grace_seconds)
        server.start()
        log.info("serving /metrics and /api/v1/alertmanager on %s:%d", host, server.port)
    try:
        with collector.settled():  # start-up's heap frozen: runtime/collector.py
            return run_forever(
                steward, settings.tick_seconds, stop, max_ticks=max_ticks, wake=wake, on_tick=metrics.record
            )
    finally:
        if server is not None:
            server.stop()
