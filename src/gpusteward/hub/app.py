"""The hub's web app: the fleet overview, a cluster's drill-down (linking to the member's own
pages), the fleet-wide findings, the weekly report and the fleet showback, and the same data as
JSON under ``/api/v1/hub``. Read-only: the hub never acts, and no route changes anything.

The same hardening as the member's app: ``web.security.SecurityHeaders`` (a CSP with no inline
script or style) and autoescaped templates; the charts are ``report.charts`` SVG.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from gpusteward.hub import report, views
from gpusteward.hub.access import COOKIE, HubAccess, RequireAccess
from gpusteward.hub.settings import HubSettings
from gpusteward.hub.store import HubStore
from gpusteward.report.charts import bar_chart
from gpusteward.report.line_chart import line_chart
from gpusteward.web.app import STATIC
from gpusteward.web.auth import AuthError, read_form
from gpusteward.web.data import json_response
from gpusteward.web.pages.base import svg
from gpusteward.web.security import SecurityHeaders, templates

TEMPLATES = templates(Path(__file__).parent / "templates")
MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
ClusterFilter = Annotated[str, Query(max_length=63, description="Only this cluster's findings.")]


def _charts(
    settings: HubSettings, store: HubStore, rows: list[dict[str, Any]], now: datetime
) -> dict[str, Any]:
    names = [r["name"] for r in rows]

    def col(key: str) -> list[float]:
        return [views.finite(r[key]) for r in rows]

    labels, util = views.util_series(store, names, now, span=views.chart_span(settings, store, now))
    queue = {"started": col("queue_p50_h"), "waiting": col("waiting_p50_h")}
    return {
        "util": svg(line_chart(labels, util, title="Utilisation per cluster", unit="%", y_max=100)),
        "gpus": svg(
            bar_chart(names, {"GPUs": col("gpus"), "idle": col("idle_gpus")}, title="GPUs and idle GPUs")
        ),
        "waste": svg(bar_chart(names, {"waste / h": col("waste_cost_per_hour")}, title="Waste per hour")),
        "saved": svg(bar_chart(names, {"saved": col("saved_cost_to_date")}, title="Savings to date")),
        "queue": svg(
            bar_chart(names, queue, title="Queue time p50 (h): started in the last hour, still waiting")
        ),
    }


def create_hub_app(settings: HubSettings, store: HubStore, *, now: Any = None) -> FastAPI:
    """The app over ``store``; ``now`` (a callable) is for tests that fix the time."""
    clock = now or (lambda: datetime.now(UTC))
    token = settings.web.token
    access = HubAccess(token.get_secret_value() if token is not None else None)
    app = FastAPI(title="gpusteward hub", version="1", docs_url=None, redoc_url=None, openapi_url=None)

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        context = {"path": request.url.path, "now": clock(), **ctx}
        return TEMPLATES.TemplateResponse(request, name, context, status_code=status)

    def overview_data() -> dict[str, Any]:
        at = clock()
        rows = views.cluster_rows(settings, store, at)
        return {
            "at": at,
            "clusters": rows,
            "totals": views.totals(rows),
            "advice": views.cross_cluster(settings, store, at - views.DAY, at),
        }

    @app.exception_handler(AuthError)
    async def _refused(request: Request, e: AuthError) -> Response:
        return page(request, "hub_message.html.j2", e.status, title="Refused", text=e.message)

    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request) -> Response:
        return page(request, "hub_login.html.j2", failed=False)

    @app.post("/login", response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        form = await read_form(request, max_bytes=4096)
        if not access.token_ok(form.get("token", "").strip()):
            return page(request, "hub_login.html.j2", 401, failed=True)
        resp = RedirectResponse("/", status_code=303)
        if access.required:
            resp.set_cookie(
                COOKIE,
                access.cookie_value(),
                httponly=True,
                samesite="strict",
                secure=settings.web.secure_cookies,
            )
        return resp

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request) -> Response:
        data = overview_data()
        return page(
            request,
            "hub_overview.html.j2",
            **data,
            charts=_charts(settings, store, data["clusters"], data["at"]),
        )

    @app.get("/clusters/{name}", response_class=HTMLResponse)
    def cluster(request: Request, name: str) -> Response:
        at = clock()
        found = views.cluster_detail(settings, store, name, at)
        if found is None:
            return page(request, "hub_message.html.j2", 404, title="Not found", text=f"no cluster {name!r}")
        util_labels, util = views.util_series(store, [name], at, span=views.chart_span(settings, store, at))
        days = [d["day"] for d in found["waste_cost_per_day"]]
        money = {
            "waste": [views.finite(d["cost"]) for d in found["waste_cost_per_day"]],
            "saved": [views.finite(d["cost"]) for d in found["saved_cost_per_day"]][: len(days)],
        }
        if len(money["saved"]) != len(days):
            money.pop("saved")
        charts = {
            "util": svg(line_chart(util_labels, util, title=f"Utilisation of {name}", unit="%", y_max=100)),
            "money": svg(bar_chart(days, money, title="Waste and savings per day")),
        }
        return page(request, "hub_cluster.html.j2", c=found, charts=charts)

    @app.get("/findings", response_class=HTMLResponse)
    def findings(request: Request, cluster: ClusterFilter = "") -> Response:
        rows = views.fleet_findings(settings, store, cluster, limit=2000)
        return page(
            request,
            "hub_findings.html.j2",
            rows=rows,
            cluster=cluster,
            names=[m.name for m in settings.members],
        )

    @app.get("/reports/weekly", response_class=HTMLResponse)
    def weekly(request: Request) -> Response:
        return page(request, "hub_weekly.html.j2", r=report.weekly(settings, store, clock()))

    @app.get("/reports/showback", response_class=HTMLResponse)
    def showback(request: Request, month: Annotated[str, Query(max_length=7)] = "") -> Response:
        month = month if MONTH.match(month) else f"{clock():%Y-%m}"
        return page(request, "hub_showback.html.j2", s=report.showback(settings, store, month))

    # -- the same as JSON ----------------------------------------------------------------------
    @app.get("/api/v1/hub/overview")
    def api_overview() -> Response:
        return json_response(overview_data())

    @app.get("/api/v1/hub/clusters/{name}")
    def api_cluster(name: str) -> Response:
        found = views.cluster_detail(settings, store, name, clock())
        if found is None:
            return json_response({"error": f"no cluster {name!r}"}, 404)
        return json_response(found)

    @app.get("/api/v1/hub/findings")
    def api_findings(
        cluster: ClusterFilter = "", limit: Annotated[int, Query(ge=1, le=10_000)] = 2000
    ) -> Response:
        return json_response(views.fleet_findings(settings, store, cluster, limit=limit))

    @app.get("/api/v1/hub/reports/weekly")
    def api_weekly() -> Response:
        return json_response(report.weekly(settings, store, clock()))

    @app.get("/api/v1/hub/reports/showback")
    def api_showback(month: Annotated[str, Query(pattern=r"^\d{4}-(0[1-9]|1[0-2])$")]) -> Response:
        return json_response(report.showback(settings, store, month))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(RequireAccess, access=access)
    app.add_middleware(SecurityHeaders)  # outermost: refusals carry the CSP too
    return app
