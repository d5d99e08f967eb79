"""The ASGI app: ``GET /metrics``, ``GET /healthz`` and ``POST /api/v1/alertmanager``.

The receiver never touches the steward: it validates, maps the alerts' labels to GPUs
and workloads, and wakes the loop, whose next tick evaluates them (at once, or when the
wake-up interval is over: ``web.wakeups``). A bad payload gets a 400 naming the problems and
changes nothing. The body is read through ``BodyLimit`` (413 past the limit, never buffered
whole), and the receiver needs a bearer token unless it is explicitly opened to anyone.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.prometheus.parse import LabelMap
from gpusteward.runtime.driver import Wake
from gpusteward.web.alerts import WebhookPayload, alert_status, problems, targets
from gpusteward.web.limits import BodyLimit
from gpusteward.web.metrics import StewardMetrics
from gpusteward.web.wakeups import CoalescedWake

log = logging.getLogger(__name__)


def _error(status: int, error: str, details: list[str] | None = None) -> JSONResponse:
    body: dict[str, object] = {"error": error}
    if details:
        body["problems"] = details
    return JSONResponse(body, status_code=status)


def create_app(
    metrics: StewardMetrics,
    wake: Wake,
    *,
    token: str | None = None,
    labels: LabelMap | None = None,
    ignore_pods: re.Pattern[str] | None = None,
    max_body_bytes: int = 4 * 1024 * 1024,
    open_to_anyone: bool = False,
    min_wake_interval_s: float = 10.0,
) -> FastAPI:
    """``token`` or ``open_to_anyone`` must be given: an anonymous receiver that makes the agent
    tick is a choice, never a default (``server.alertmanager_open``)."""
    if token is None and not open_to_anyone:
        raise ConfigError(
            "server: the Alertmanager receiver needs server.alertmanager_token, or "
            "server.alertmanager_open: true to take alerts from anyone who can reach it"
        )
    app = FastAPI(title="gpusteward", docs_url=None, redoc_url=None, openapi_url=None)
    # Counts the body as it streams in: a huge (or endless chunked) POST costs at most the limit.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    wakeups = CoalescedWake(wake, min_wake_interval_s)

    @app.get("/metrics")
    def get_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/api/v1/alertmanager")
    async def alertmanager(request: Request) -> JSONResponse:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _error(401, "missing or wrong bearer token")
        body = await request.body()  # BodyLimit has cut it off past max_body_bytes
        try:
            data: Any = json.loads(body)
        except RecursionError:
            return _error(400, "body is not JSON: nested too deeply")
        except ValueError as e:  # UnicodeDecodeError included
            return _error(400, f"body is not JSON: {e}")
        try:
            payload = WebhookPayload.model_validate(data)
        except RecursionError:
            return _error(400, "not an Alertmanager v4 webhook payload: nested too deeply")
        except ValidationError as e:
            found = problems(e)
            log.warning("rejected Alertmanager payload: %s", "; ".join(found)[:500])
            return _error(400, "not an Alertmanager v4 webhook payload", found)
        for alert in payload.alerts:
            metrics.alerts.labels(alert_status(alert, payload)).inc()
        hit = targets(payload, labels, ignore_pods)
        now = wakeups.alert(hit.describe()) if hit.alerts else False
        return JSONResponse(
            {
                "accepted": len(payload.alerts),
                "firing": list(hit.alerts),
                "gpus": list(hit.gpus),
                "workloads": list(hit.workloads),
                "evaluating": bool(hit.alerts),
                # False: within the wake-up interval; the alerts are evaluated when it is over.
                "ticking_now": now,
            },
            status_code=202,
        )

    return app
