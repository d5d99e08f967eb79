"""``gpusteward serve --workers N``: the web admin answered by N processes on one socket.

One Python process runs one request's Python at a time: under 20 readers, a findings page
waited behind every other request on one interpreter. The pages and the API only read the
state database the loop writes (and write what people do, in their own transactions), so N
processes can answer N requests at once, each with its own connection pool.

uvicorn's supervisor starts the workers (fresh interpreters), restarts one that dies and passes
SIGTERM on. Each worker builds the app from the config file named in the environment, as
``serve`` does in one process. Per process: the failed-login throttle (each worker allows its
share of ``web.login_max_failures``, so the server as a whole still allows about that many)
and the live probe (each refreshes its own window from the source, N times the reads).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fastapi import FastAPI

from gpusteward.domain.ports import SystemClock
from gpusteward.runtime import collector
from gpusteward.runtime.build import load_rules
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.logs import configure_logging, configured
from gpusteward.store.db import StateStore
from gpusteward.web.app import create_web_app
from gpusteward.web.live import Probe

#: What a worker is told by the process that started it (spawned workers share no memory).
ENV_CONFIG = "GPUSTEWARD_SERVE_WORKER_CONFIG"
ENV_WORKERS = "GPUSTEWARD_SERVE_WORKER_COUNT"
ENV_VERBOSE = "GPUSTEWARD_SERVE_WORKER_VERBOSE"


def app_from_env() -> FastAPI:
    """uvicorn's app factory in each worker process."""
    config = os.environ.get(ENV_CONFIG, "")
    settings = load_settings(Path(config) if config else None)
    configure_logging(settings.log.format, logging.INFO if os.environ.get(ENV_VERBOSE) else logging.WARNING)
    store = StateStore(settings.store.url)
    app = create_web_app(
        store,
        settings,
        load_rules(settings),
        live=Probe(settings, store, SystemClock()),
        processes=int(os.environ.get(ENV_WORKERS, "1")),
    )
    collector.freeze_start_up()  # for good: the worker ends with its process
    return app


def serve_workers(
    config: Path | None, host: str, port: int, workers: int, *, verbose: bool, grace_s: int
) -> None:
    """Serve with ``workers`` processes until SIGTERM or SIGINT (the supervisor passes it on)."""
    import uvicorn

    os.environ[ENV_CONFIG] = str(config.resolve()) if config is not None else ""
    os.environ[ENV_WORKERS] = str(workers)
    os.environ[ENV_VERBOSE] = "1" if verbose else ""
    uvicorn.run(
        f"{__name__}:{app_from_env.__name__}",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info" if verbose else "warning",
        lifespan="off",
        timeout_graceful_shutdown=grace_s,
        log_config=None if configured() else uvicorn.config.LOGGING_CONFIG,
    )
