"""The server-rendered pages (Jinja; htmx for the live parts and the rule preview).

Every page needs a login (a session made from an API token); anonymous requests are sent to
the login page. Forms carry the session's CSRF value. The one-click links from notices
(``/l/<signed token>``) need no login: the signature is the authority, and a confirm button
(a POST) makes the change, so a mail scanner that fetches the link cannot use it up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import yaml
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup

from gpusteward.domain.errors import ConfigError, ControlError, RuleError
from gpusteward.domain.models import ApprovalStatus, Metric
from gpusteward.domain.yamlload import load_yaml
from gpusteward.notify.links import LinkError, LinkSigner, verify
from gpusteward.report.charts import bar_chart, hbar_chart
from gpusteward.report.line_chart import line_chart
from gpusteward.store.access import Role
from gpusteward.web import data
from gpusteward.web.auth import AuthError, Principal, read_form
from gpusteward.web.context import WebContext
from gpusteward.web.security import local_path, templates

TEMPLATES = templates(Path(__file__).parent / "templates")  # autoescaped
router = APIRouter(include_in_schema=False)


def _ctx(request: Request) -> WebContext:
    ctx: WebContext = request.app.state.web
    return ctx


def _who(request: Request, role: Role = Role.VIEWER, form: dict[str, str] | None = None) -> Principal:
    ctx = _ctx(request)
    return ctx.auth.require(
        request, ctx.now(), role, form_csrf=None if form is None else form.get("csrf", "")
    )


def _page(
    request: Request, who: Principal | None, template: str, code: int = 200, **values: Any
) -> HTMLResponse:
    ctx = _ctx(request)
    pause = ctx.store.pause_state()
    base = {
        "who": who,
        "mode": "dry-run" if ctx.dry_run else "enforce",
        "pause": pause,
        "csrf": who.csrf if who else "",
        "path": request.url.path,
        "now": ctx.now(),
        "currency": ctx.settings.cost.currency,
        "can_operate": bool(who and who.can(Role.OPERATOR)),
        "can_admin": bool(who and who.can(Role.ADMIN)),
        "live_error": ctx.live.error,
    }
    return TEMPLATES.TemplateResponse(request, template, {**base, **values}, status_code=code)


def _svg(markup: str) -> Markup:
    return Markup(markup)  # noqa: S704 - built by our chart functions, which escape every text


def _back(request: Request, path: str, note: str = "") -> RedirectResponse:
    url = path + (("?" + urlencode({"note": note})) if note else "")
    return RedirectResponse(url, status_code=303)


# -- login ---------------------------------------------------------------------------------------
LOGIN_ERRORS = {"token": "unknown or revoked token"}


@router.get("/login")
def login_form(request: Request, next: str = "/", error: str = "") -> Response:
    ctx = _ctx(request)
    csrf = ctx.auth.login_csrf(request)
    # Only our own messages, by code: an anonymous link must not put its words on this page.
    why = LOGIN_ERRORS.get(error, "")
    resp = _page(request, None, "login.html.j2", login_csrf=csrf, next=_safe_next(next), error=why)
    ctx.auth.set_login_csrf(resp, csrf)
    return resp


def _safe_next(value: str) -> str:
    return local_path(value)  # only paths on this site: never an open redirect to another host


@router.post("/login")
async def login(request: Request) -> Response:
    ctx = _ctx(request)
    form = await read_form(request)
    if not ctx.auth.check_login_csrf(request, form.get("csrf", "")):
        raise AuthError(403, "missing or wrong CSRF token: reload the login page")
    rec = ctx.access.authenticate(form.get("token", "").strip(), at=ctx.now())
    nxt = _safe_next(form.get("next", "/"))
    if rec is None:
        query = urlencode({"next": nxt, "error": "token"})
        return RedirectResponse(f"/login?{query}", status_code=303)
    resp = RedirectResponse(nxt, status_code=303)
    ctx.auth.start_session(resp, rec, ctx.now())
    ctx.store.audit("web.login", ctx.now(), None, name=rec.name, role=rec.role.value)
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await read_form(request)
    _who(request, form=form)
    resp = RedirectResponse("/login", status_code=303)
    _ctx(request).auth.end_session(resp)
    return resp


# -- overview ------------------------------------------------------------------------------------
def _overview_values(ctx: WebContext) -> dict[str, Any]:
    cost = ctx.settings.cost
    ov = data.overview(
        ctx.store, ctx.steward(), ctx.now(), currency=cost.currency, rate=cost.rate, dry_run=ctx.dry_run
    )
    util = ov["utilisation"]
    eff = ov["efficiency_per_day"]
    days = [d["day"][5:] for d in ov["waste_cost_per_day"]]
    charts = {
        "utilisation": line_chart(
            [u["at"] for u in util],
            {"cluster mean": [u["pct"] for u in util]},
            title="GPU utilisation, last window (%)",
            unit="%",
            y_max=100,
        ),
        "money": bar_chart(
            days,
            {
                "waste": [d["cost"] for d in ov["waste_cost_per_day"]],
                "saved": [d["cost"] for d in ov["saved_cost_per_day"]],
            },
            title=f"Waste and savings per day ({cost.currency})",
            unit=cost.currency,
        ),
        "efficiency": line_chart(
            [d["day"][5:] for d in eff],
            {"busy share of held GPU-hours": [d["pct"] for d in eff]},
            title="GPU efficiency per day (%)",
            unit="%",
            y_max=100,
        ),
        "actions": bar_chart(
            ov["actions_24h_by_hour"]["hours"],
            ov["actions_24h_by_hour"]["levels"],
            title="Actions in the last 24 h, per hour and level",
        ),
    }
    return {"ov": ov, "charts": {k: _svg(v) for k, v in charts.items()}}


@router.get("/")
def overview(request: Request) -> Response:
    who = _who(request)
    return _page(request, who, "overview.html.j2", **_overview_values(_ctx(request)))


@router.get("/partials/overview")
def overview_partial(request: Request) -> Response:
    who = _who(request)
    return _page(request, who, "_overview_body.html.j2", **_overview_values(_ctx(request)))


# -- findings and workloads ----------------------------------------------------------------------
def _pager(request: Request, next_before: int | None) -> dict[str, str]:
    """Links to the next (older) page, "" on the last, and back to the newest, "" on the first."""
    params = {k: v for k, v in request.query_params.items() if k != "before"}
    path = request.url.path
    older = "" if next_before is None else f"{path}?{urlencode({**params, 'before': next_before})}"
    newest = f"{path}?{urlencode(params)}" if "before" in request.query_params else ""
    return {"older": older, "newest": newest}


@router.get("/findings")
def findings(
    request: Request,
    kind: str = "",
    owner: str = "",
    team: str = "",
    node: str = "",
    status: str = "open",
    before: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> Response:
    who = _who(request)
    ctx = _ctx(request)
    gpus = ctx.gpus()
    listing = data.findings(
        ctx.store,
        gpus,
        kind=kind,
        owner=owner,
        team=team,
        node=node,
        status=status,
        limit=limit,
        before=before,
    )
    filters = {"kind": kind, "owner": owner, "team": team, "node": node, "status": status}
    return _page(
        request,
        who,
        "findings.html.j2",
        rows=listing.rows,
        facets=data.facets(ctx.store, gpus, status=status),
        filters=filters,
        pager=_pager(request, listing.next_before),
    )


@router.get("/workloads/{workload_id:path}")
def workload(request: Request, workload_id: str, note: str = "") -> Response:
    who = _who(request)
    ctx = _ctx(request)
    found = data.workload(ctx.store, workload_id, ctx.gpus())
    if found is None:
        return _page(
            request, who, "message.html.j2", 404, title="Not found", message=f"No workload {workload_id!r}."
        )
    steward = ctx.steward()
    uuids = found["workload"].get("gpu_uuids") or (
        found["findings"][0]["gpu_uuids"] if found["findings"] else []
    )
    charts = []
    for metric, title, unit, top in (
        (Metric.GPU_UTIL, "GPU utilisation (%)", "%", 100.0),
        (Metric.MEM_USED, "GPU memory used (MiB)", "MiB", None),
    ):
        labels, series = data.gpu_series(steward, uuids, metric, ctx.now())
        if labels:
            charts.append(_svg(line_chart(labels, series, title=title, unit=unit, y_max=top)))
    for f in found["findings"][:1]:
        for expr, per_gpu in f["evidence"].items():
            names = [data.gpu_name(ctx.gpus(), u) for u in per_gpu]
            values = [float(v) if v is not None else 0.0 for v in per_gpu.values()]
            charts.append(_svg(hbar_chart(names, values, title=f"Evidence: {expr}")))
    return _page(
        request,
        who,
        "workload.html.j2",
        w=found,
        charts=charts,
        note=note,
        max_snooze=ctx.settings.policy.snooze.max_hours,
        wid_q=quote(workload_id, safe="/:"),
    )


@router.post("/workloads/{workload_id:path}/snooze")
async def snooze(request: Request, workload_id: str) -> Response:
    form = await read_form(request)
    who = _who(request, Role.OPERATOR, form)
    path = f"/workloads/{quote(workload_id, safe='/:')}"
    try:
        hours = float(form.get("hours", "0"))
        _ctx(request).snooze(workload_id, hours=hours, by=who.name, reason=form.get("reason", ""))
    except ValueError:
        return _back(request, path, "hours must be a number")
    except ControlError as e:
        return _page(request, who, "message.html.j2", 409, title="Not snoozed", message=str(e), back=path)
    return _back(request, path, f"snoozed for {hours:g} h")


# -- actions, audit ------------------------------------------------------------------------------
@router.get("/actions")
def actions(
    request: Request,
    q: str = "",
    status: str = "",
    level: str = "",
    workload: str = "",
    before: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> Response:
    who = _who(request)
    listing = data.actions(
        _ctx(request).store, q=q, status=status, level=level, workload=workload, limit=limit, before=before
    )
    query = urlencode({"q": q, "status": status, "level": level, "workload": workload})
    return _page(
        request,
        who,
        "actions.html.j2",
        rows=listing.rows,
        q=q,
        status=status,
        level=level,
        workload=workload,
        query=query,
        pager=_pager(request, listing.next_before),
    )


@router.get("/audit")
def audit(
    request: Request,
    q: str = "",
    event: str = "",
    workload: str = "",
    before: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> Response:
    who = _who(request)
    listing = data.audit(_ctx(request).store, q=q, event=event, workload=workload, limit=limit, before=before)
    query = urlencode({"q": q, "event": event, "workload": workload})
    return _page(
        request,
        who,
        "audit.html.j2",
        rows=listing.rows,
        q=q,
        event=event,
        workload=workload,
        query=query,
        pager=_pager(request, listing.next_before),
    )


# -- approvals -----------------------------------------------------------------------------------
@router.get("/approvals")
def approvals(request: Request, note: str = "") -> Response:
    who = _who(request)
    rows = list(reversed(_ctx(request).store.approvals(limit=500)))
    pending = [a for a in rows if a.status is ApprovalStatus.PENDING]
    done = [a for a in rows if a.status is not ApprovalStatus.PENDING]
    return _page(request, who, "approvals.html.j2", pending=pending, done=done, note=note)


@router.post("/approvals/{approval_id}")
async def decide(request: Request, approval_id: int) -> Response:
    form = await read_form(request)
    who = _who(request, Role.OPERATOR, form)
    approve = form.get("decision") == "approve"
    try:
        _ctx(request).decide(approval_id, approve=approve, by=who.name, reason=form.get("reason", ""))
    except ControlError as e:
        return _page(
            request, who, "message.html.j2", 409, title="Not decided", message=str(e), back="/approvals"
        )
    return _back(request, "/approvals", f"request {approval_id} {'approved' if approve else 'rejected'}")


# -- rules ---------------------------------------------------------------------------------------
@router.get("/rules")
def rules(request: Request, note: str = "") -> Response:
    who = _who(request)
    ctx = _ctx(request)
    rows = [data.rule_row(r) for r in ctx.rules]
    return _page(request, who, "rules.html.j2", rows=rows, note=note, rules_file=ctx.settings.web.rules_file)


@router.get("/rules/{name}/edit")
def rule_edit(request: Request, name: str) -> Response:
    who = _who(request)
    ctx = _ctx(request)
    found = [r for r in ctx.rules if r.name == name]
    if not found:
        return _page(request, who, "message.html.j2", 404, title="Not found", message=f"No rule {name!r}.")
    return _page(
        request,
        who,
        "rule_edit.html.j2",
        name=name,
        text=data.rule_yaml(found[0]),
        rules_file=ctx.settings.web.rules_file,
    )


@router.post("/rules/preview")
async def rule_preview(request: Request) -> Response:
    form = await read_form(request)
    who = _who(request, Role.VIEWER, form)
    ctx = _ctx(request)
    try:
        compiled, rows = data.preview(form.get("text", ""), ctx.steward(), ctx.now())
    except RuleError as e:
        # 200: htmx swaps in only successful answers; the API answers 422 for the same error.
        return _page(request, who, "_preview.html.j2", error=str(e), rows=[], compiled=[])
    return _page(
        request, who, "_preview.html.j2", error="", rows=rows, compiled=[data.rule_row(r) for r in compiled],
        live=ctx.steward() is not None,
    )  # fmt: skip


@router.post("/rules/save")
async def rule_save(request: Request) -> Response:
    form = await read_form(request)
    who = _who(request, Role.ADMIN, form)
    ctx = _ctx(request)
    target = ctx.settings.web.rules_file
    if target is None:
        why = "web.rules_file is not set: rules can be previewed here, not saved."
        return _page(request, who, "message.html.j2", 409, title="Not saved", message=why, back="/rules")
    try:
        compiled, _ = data.preview(form.get("text", ""), ctx.steward(), ctx.now())
        _save_rules(target, [r.spec.model_dump(mode="json", exclude_defaults=True) for r in compiled])
    except RuleError as e:
        return _page(request, who, "message.html.j2", 422, title="Not saved", message=str(e), back="/rules")
    names = ", ".join(r.name for r in compiled)
    ctx.store.audit("rules.edited", ctx.now(), None, by=who.name, rules=names, file=str(target))
    note = f"saved {names} to {target}"
    if target in ctx.settings.rules.files:
        try:
            from gpusteward.runtime.build import load_rules

            new = load_rules(ctx.settings)
        except ConfigError as e:
            note += f"; not in force: {e}"
        else:
            ctx.rules = new
            if ctx.on_rules_saved is not None:
                ctx.on_rules_saved(new)
            note += "; in force from the next tick"
    else:
        note += "; list it under rules.files to use it"
    return _back(request, "/rules", note)


def _save_rules(path: Path, specs: list[dict[str, Any]]) -> None:
    """Replace (by name) or add the edited rules in the rule file, keeping its other rules."""
    current: list[dict[str, Any]] = []
    if path.exists():
        try:
            loaded = load_yaml(path).data or {}
        except ConfigError as e:
            raise RuleError(e.problem, path=e.path, line=e.line) from e
        current = list(loaded.get("rules") or []) if isinstance(loaded, dict) else []
    by_name = {s["name"]: s for s in specs}
    merged = [by_name.pop(str(r.get("name")), r) for r in current] + list(by_name.values())
    text = yaml.safe_dump({"rules": merged}, sort_keys=False, allow_unicode=True, width=100)
    from gpusteward.analysis.rules import parse_rule_pack

    parse_rule_pack(text, str(path))  # the whole file must still be valid before it is written
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# -- settings ------------------------------------------------------------------------------------
@router.get("/settings")
def settings(request: Request, note: str = "") -> Response:
    who = _who(request)
    ctx = _ctx(request)
    tokens = ctx.access.tokens() if who.can(Role.ADMIN) else []
    return _page(request, who, "settings.html.j2", note=note, tokens=tokens, source=ctx.settings.source.name)


@router.post("/settings/pause")
async def set_pause(request: Request) -> Response:
    form = await read_form(request)
    who = _who(request, Role.OPERATOR, form)
    paused = form.get("paused") == "1"
    _ctx(request).set_paused(paused, by=who.name, reason=form.get("reason", ""))
    return _back(request, _safe_next(form.get("next", "/settings")), "paused" if paused else "resumed")


# -- one-click links from notices ----------------------------------------------------------------
def _link_claims(request: Request, token: str) -> dict[str, Any]:
    ctx = _ctx(request)
    return verify(ctx.auth.key, LinkSigner.PURPOSE, token, now=ctx.now())


def _describe(claims: dict[str, Any]) -> str:
    do = claims.get("do")
    if do in ("approve", "reject"):
        return f"{do} approval request {claims.get('approval')}"
    if do == "snooze":
        return f"snooze {claims.get('workload')} for {claims.get('hours')} h"
    return "nothing (unknown link)"


@router.get("/l/{token}")
def link_form(request: Request, token: str) -> Response:
    ctx = _ctx(request)
    try:
        claims = _link_claims(request, token)
    except LinkError as e:
        return _page(request, None, "message.html.j2", 403, title="Link refused", message=str(e))
    if ctx.access.link_used(str(claims["n"])):
        return _page(
            request, None, "message.html.j2", 409, title="Link refused", message="this link was used already"
        )
    csrf = ctx.auth.login_csrf(request)
    resp = _page(
        request, None, "link.html.j2", token=token, claims=claims, what=_describe(claims), login_csrf=csrf
    )
    ctx.auth.set_login_csrf(resp, csrf)
    return resp


@router.post("/l/{token}")
async def link_use(request: Request, token: str) -> Response:
    ctx = _ctx(request)
    form = await read_form(request)
    if not ctx.auth.check_login_csrf(request, form.get("csrf", "")):
        raise AuthError(403, "missing or wrong CSRF token: open the link again")
    try:
        claims = _link_claims(request, token)
    except LinkError as e:
        return _page(request, None, "message.html.j2", 403, title="Link refused", message=str(e))
    if claims.get("do") not in ("approve", "reject", "snooze"):
        return _page(request, None, "message.html.j2", 400, title="Link refused", message="unknown link")
    if not ctx.access.use_link(str(claims["n"]), str(claims["do"]), at=ctx.now()):
        return _page(
            request, None, "message.html.j2", 409, title="Link refused", message="this link was used already"
        )
    by = f"link:{claims.get('to', '?')}"
    reason = form.get("reason", "").strip() or "by one-click link"
    try:
        if claims["do"] == "snooze":
            ctx.snooze(str(claims["workload"]), hours=float(claims["hours"]), by=by, reason=reason)
        else:
            ctx.decide(int(claims["approval"]), approve=claims["do"] == "approve", by=by, reason=reason)
    except ControlError as e:
        return _page(request, None, "message.html.j2", 409, title="Not done", message=str(e))
    return _page(request, None, "message.html.j2", 200, title="Done", message=f"Done: {_describe(claims)}.")
