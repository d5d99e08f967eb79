"""The ASGI app: ``GET /metrics``, ``GET /healthz`` and ``POST /api/v1/alertmanager``.

The receiver never touches the steward: it validates, maps the alerts' labels to GPUs
and workloads, and wakes the loop, whose next tick (at once) evaluates them. A bad
payload gets a 400 naming the problems and changes nothing.
"""

from __future__ import annotations

import hmac
import json
import logging
import re

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from gpusteward.integrations.prometheus.parse import LabelMap
from gpusteward.runtime.loop import Wake
from gpusteward.web.alerts import WebhookPayload, alert_status, problems, targets
from gpusteward.web.metrics import StewardMetrics

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
) -> FastAPI:
    app = FastAPI(title="gpusteward", docs_url=None, redoc_url=None, openapi_url=None)

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
        body = await request.body()
        if len(body) > max_body_bytes:
            return _error(413, f"body over {max_body_bytes} bytes")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return _error(400, f"body is not JSON: {e}")
        try:
            payload = WebhookPayload.model_validate(data)
        except ValidationError as e:
            found = problems(e)
            log.warning("rejected Alertmanager payload: %s", "; ".join(found)[:500])
            return _error(400, "not an Alertmanager v4 webhook payload", found)
        for alert in payload.alerts:
            metrics.alerts.labels(alert_status(alert, payload)).inc()
        hit = targets(payload, labels, ignore_pods)
        if hit.alerts:
            wake.set(hit.describe())
        return JSONResponse(
            {
                "accepted": len(payload.alerts),
                "firing": list(hit.alerts),
                "gpus": list(hit.gpus),
                "workloads": list(hit.workloads),
                "evaluating": bool(hit.alerts),
            },
            status_code=202,
        )

    return app
