"""XSS payloads and a state store seeded with them, shared by the page-render test and the
browser test. Every string the source controls (a pod annotation, a trace cell: workload id and
name, owner, team, GPU name, findings, reasons, notices) and every free-text field a person
types (reasons, token names, rule kinds and messages) carries a payload that, if it ever
rendered raw, sets ``window.__xss`` (and the title to "pwned") in a browser."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI
from starlette.routing import Mount

from gpusteward.analysis.rules import compile_rules, parse_rule_pack
from gpusteward.domain.models import (
    ActionStatus,
    Decision,
    Finding,
    Level,
    Notice,
    Owner,
    RuleAction,
    Workload,
    WorkloadKind,
)
from gpusteward.notify.links import LinkSigner
from gpusteward.policy.rollout import StopRecord
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.store.access import AccessStore
from gpusteward.web.app import create_web_app, signing_key
from gpusteward.web.live import Attached

from .conftest import Demo

#: Raw markup that must never reach a page unescaped (an escaped page shows ``&lt;script&gt;``).
MARKERS = ("<script>window.__xss", "<img src=x onerror", "<svg onload")
#: The free-text query parameters the pages read (unknown ones are ignored, so every page gets
#: them all).
PARAMS = (
    "note",
    "q",
    "event",
    "workload",
    "kind",
    "owner",
    "team",
    "node",
    "next",
    "error",
)
#: Parameters with a closed set of values: a payload there is refused (422), so they get their
#: own test instead of riding along with the free-text ones.
CLOSED_PARAMS = ("status", "level")
PAYLOAD_RULE = "payload-rule"


def flat_routes(app: FastAPI) -> list[Any]:
    """``app.routes`` with included routers opened: FastAPI 0.16x keeps each as one entry.
    Each item has ``path`` and ``methods``; ``mount_of`` tells a mounted app from a route."""
    try:
        from fastapi.routing import iter_route_contexts  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # older FastAPI: included routes are copied into app.routes
        return list(app.routes)
    return list(iter_route_contexts(app.routes))


def mount_of(route: Any) -> Mount | None:
    inner = getattr(route, "original_route", route)
    return inner if isinstance(inner, Mount) else None


def xss(tag: str) -> str:
    """Breaks out of a quoted attribute, then tries a script element and two event handlers."""
    run = f"window.__xss='{tag}';document.title='pwned'"
    return f'"\'><script>{run}</script><img src=x onerror="{run}"><svg onload="{run}">'


def unescaped(html: str) -> list[str]:
    """Each marker found raw in ``html``, with some context to show where."""
    found = []
    for m in MARKERS:
        at = html.find(m)
        if at >= 0:
            found.append(html[max(0, at - 120) : at + 80])
    return found


@dataclass(frozen=True)
class Seeded:
    wid: str
    link: str  # path of a one-click snooze link for the payload workload
    missing: str  # a workload id that is not there (its 404 page echoes it)

    @property
    def workload_path(self) -> str:
        return "/workloads/" + quote(self.wid, safe="")


def reflected_query() -> str:
    return urlencode({p: xss(f"q-{p}") for p in PARAMS})


def seed(demo: Demo) -> Seeded:
    """Put a payload in every source-controlled and person-typed string the pages show."""
    store, now = demo.store, demo.clock.now()
    wid = "team-a/" + xss("wid")
    gpu = xss("gpu")
    owner = Owner(user=xss("owner"), team=xss("team"), contact=xss("contact"))
    workload = Workload(
        id=wid,
        kind=WorkloadKind.POD,
        name=xss("name"),
        owner=owner,
        gpus_requested=1,
        gpu_uuids=(gpu,),
        started_at=now - timedelta(hours=1),
        source=xss("source"),
    )
    store.remember_workloads([workload], now)
    store.record_findings(
        [
            Finding(
                rule=PAYLOAD_RULE,
                kind=xss("kind"),
                action=RuleAction.RECLAIM,
                at=now,
                gpu_uuids=(gpu,),
                workload_id=wid,
                evidence={xss("expr"): {gpu: 1.0}},
                wasted_minutes=30,
                wasted_gpu_hours=0.5,
                wasted_cost=1.5,
                message=xss("message"),
            )
        ],
        now,
    )
    decisions = [
        Decision(
            workload_id=wid,
            at=now,
            level=Level.GRACEFUL_STOP,
            step=xss(f"step{i}"),
            reason=xss(f"reason{i}"),
            rule=PAYLOAD_RULE,
            gpu_uuids=(gpu,),
            idempotency_key=f"xss-{i}",
        )
        for i in range(3)
    ]
    store.record_decisions(decisions)
    action = store.plan_action(decisions[0], dry_run=False, at=now)
    assert action is not None
    store.start_action(action.id, now)
    store.finish_action(action.id, ActionStatus.FAILED, xss("detail"), now)
    store.request_approval(decisions[1], dry_run=False, at=now, ttl=timedelta(hours=6))  # stays pending
    done = store.request_approval(decisions[2], dry_run=False, at=now, ttl=timedelta(hours=6))
    store.decide_approval(done.id, approve=False, by=xss("decider"), reason=xss("decision"), at=now)
    store.snooze(wid, until=now + timedelta(hours=1), by=xss("snoozer"), reason=xss("snooze"), at=now)
    notice = Notice(at=now, workload_id=wid, owner=owner, subject=xss("subject"), body=xss("body"))
    store.record_notice(notice, sent=True)
    store.audit(xss("event"), now, wid, note=xss("audit"))
    store.set_paused(True, by=xss("pauser"), reason=xss("pause"), at=now)
    AccessStore(store).create_token(xss("token"), "viewer", at=now)
    # A suspected false kill whose workload, scope, rule, class and why carry payloads, and an
    # appeal (the Roll-out page lists the one; the audit log shows the other).
    book = RolloutBook(store, demo.settings.policy)
    watch = book.watch()
    stop = StopRecord(wid, now, xss("sig"), xss("scope"), xss("fkrule"), xss("cls"), xss("user"))
    watch.stops.append(stop)
    watch.suspect(stop, xss("why"), now)
    book.save_watch(watch, now)
    book.appeal(wid, by=xss("appealer"), reason=xss("appeal"), now=now)
    links = LinkSigner(signing_key(demo.settings, AccessStore(store)), "")
    link = links.snooze_url(wid, hours=1, to=xss("to"), now=now)
    return Seeded(wid=wid, link=link, missing="missing/" + xss("missing"))


def payload_rules(demo: Demo) -> list[object]:
    """The demo's rules plus one whose free-text fields carry payloads (names are a safe pattern)."""
    text = (
        "rules:\n"
        f"  - name: {PAYLOAD_RULE}\n"
        f"    kind: {quote_yaml(xss('rk')[:100])}\n"
        f"    description: {quote_yaml(xss('rdesc'))}\n"
        f"    message: {quote_yaml(xss('rmsg'))}\n"
        "    when: mean(gpu_util_pct, 10m) < 5\n"
    )
    return [*demo.steward.rules, *compile_rules(parse_rule_pack(text))]


def quote_yaml(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def payload_app(demo: Demo) -> FastAPI:
    return create_web_app(
        demo.store,
        demo.settings,
        payload_rules(demo),  # type: ignore[arg-type]
        live=Attached(demo.steward),
        clock=demo.clock,
    )
