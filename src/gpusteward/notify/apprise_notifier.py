"""Notices on the channels teams use (Slack, DingTalk, WeCom, Feishu/Lark, Teams, e-mail,
webhooks), through apprise, with templates per channel and language (``notify/messages``).

apprise is an extra (``gpusteward[notify]``), imported only when a notice is sent. A notice is
enriched from the state store: the open finding (GPU, utilisation, memory, how long, money so
far), the ladder (what happens next, and when), pending approvals (one-click links). A channel
that fails is logged without its URL (URLs carry secrets) and never fails the tick.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2

from gpusteward.domain.health import Health
from gpusteward.domain.models import ApprovalStatus, Level, Notice
from gpusteward.domain.store_ports import TickStore
from gpusteward.notify.links import LinkSigner
from gpusteward.notify.settings import NotifySettings, Route
from gpusteward.notify.templates import interruption_context, is_interruption
from gpusteward.policy.demand import said
from gpusteward.policy.health import health_of
from gpusteward.policy.settings import PolicySettings

log = logging.getLogger(__name__)

MESSAGES = Path(__file__).parent / "messages"

#: apprise URL scheme → template channel. Other schemes use the markdown templates.
CHANNELS: Mapping[str, str] = {
    "mailto": "html",
    "mailtos": "html",
    "slack": "slack",  # markdown, short; apprise turns it into Slack mrkdwn
    "dingtalk": "md",
    "wecombot": "text",  # WeCom bots get a text message: markdown would show as is
    "feishu": "text",
    "lark": "text",
    "workflows": "md",
    "msteams": "md",
    "json": "text",
    "jsons": "text",
    "form": "text",
    "forms": "text",
    "xml": "text",
    "xmls": "text",
}
_FORMATS = {"html": "html", "slack": "markdown", "md": "markdown", "text": "text"}


def channel_of(url: str) -> str:
    return CHANNELS.get(url.split("://", 1)[0].lower(), "md")


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(MESSAGES),
        autoescape=jinja2.select_autoescape(["html.j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


@dataclass(frozen=True)
class Rendered:
    title: str
    body: str
    body_format: str


@dataclass
class Delivery:
    """One send to one URL: kept for tests and for the caller's logs (URL masked)."""

    channel: str
    language: str
    title: str
    ok: bool
    target: str = ""


@dataclass
class Templates:
    """Renders a message kind (owner, admin, digest) for a channel and a language, falling back
    to the markdown template of that language, then to English."""

    env: jinja2.Environment = field(default_factory=_env)

    def render(self, kind: str, channel: str, language: str, context: Mapping[str, Any]) -> Rendered:
        names = [f"{language}/{kind}.{channel}.j2", f"{language}/{kind}.md.j2", f"en/{kind}.md.j2"]
        tmpl = self.env.select_template(names)
        used = Path(tmpl.name or "").name.split(".")[1]
        # Each kind's base template lays out its title block, a ===== line, then its body block.
        title, sep, body = tmpl.render(dict(context)).partition("=====")
        if not sep:
            raise jinja2.TemplateError(f"{tmpl.name}: no ===== line between title and body")
        return Rendered(" ".join(title.split()), body.strip(), _FORMATS.get(used, "markdown"))


def _mask(url: str) -> str:
    return url.split("://", 1)[0] + "://…"


class AppriseNotifier:
    """A ``Notifier`` that routes each notice per owner, team or to admins, and sends it with
    apprise in the route's language and each channel's template."""

    def __init__(
        self,
        settings: NotifySettings,
        store: TickStore | None = None,
        *,
        policy: PolicySettings | None = None,
        links: LinkSigner | None = None,
        currency: str = "USD",
        dry_run: bool = True,
    ) -> None:
        self.settings = settings
        self.store = store
        self.policy = policy or PolicySettings()
        self.links = links
        self.currency = currency
        self.dry_run = dry_run
        self.templates = Templates()
        self.deliveries: list[Delivery] = []

    # -- routing ------------------------------------------------------------------------------
    def route_for(self, notice: Notice) -> tuple[Route | None, str]:
        """The route and the template kind of a notice."""
        s = self.settings
        if notice.owner is None:
            return s.admins, "admin"
        route = s.owners.get(notice.owner.user) or s.teams.get(notice.owner.team) or s.default
        if is_interruption(notice):
            return route, "interruption"
        return route, "notice" if notice.workload_id.startswith("budget:") else "owner"  # text complete

    def _targets(self, route: Route, notice: Notice) -> list[str]:
        contact = notice.owner.contact if notice.owner else None
        out = []
        for url in route.urls:
            if "{contact}" in url:
                if not contact:
                    continue
                url = url.replace("{contact}", contact)
            out.append(url)
        return out

    # -- sending ------------------------------------------------------------------------------
    def send(self, notice: Notice) -> None:
        route, kind = self.route_for(notice)
        if route is None:
            log.info("no notify route for %s: notice %r only logged", notice.workload_id, notice.subject)
            return
        language = route.language or self.settings.language
        context = self.context(notice)
        for url in self._targets(route, notice):
            channel = channel_of(url)
            msg = self.templates.render(kind, channel, language, context)
            self._deliver(url, channel, language, msg)

    def send_digest(self, notices: Sequence[Notice], *, at: datetime) -> None:
        """One message to admins listing ``notices`` (for the throttling wrapper's digests)."""
        route = self.settings.admins
        if route is None or not notices:
            return
        language = route.language or self.settings.language
        context = {"at": at, "notices": list(notices), "count": len(notices), "web": self._web()}
        for url in route.urls:
            channel = channel_of(url)
            self._deliver(url, channel, language, self.templates.render("digest", channel, language, context))

    def _deliver(self, url: str, channel: str, language: str, msg: Rendered) -> bool:
        try:
            import apprise  # the `notify` extra: only needed once a channel is configured
        except ImportError:
            log.error("notify routes are configured but apprise is missing: pip install 'gpusteward[notify]'")
            self.deliveries.append(Delivery(channel, language, msg.title, False, _mask(url)))
            return False
        ap = apprise.Apprise()
        # apprise's per-URL connect and read timeouts (cto, rto): a slow channel must not hold the tick.
        t = f"{self.settings.timeout_seconds:g}"
        timed = f"{url}{'&' if '?' in url else '?'}cto={t}&rto={t}"
        if not ap.add(timed):
            log.error("notify: apprise cannot use the URL %s (check its form)", _mask(url))
            self.deliveries.append(Delivery(channel, language, msg.title, False, _mask(url)))
            return False
        fmt = {
            "html": apprise.NotifyFormat.HTML,
            "markdown": apprise.NotifyFormat.MARKDOWN,
            "text": apprise.NotifyFormat.TEXT,
        }[msg.body_format]
        try:
            ok = bool(ap.notify(body=msg.body, title=msg.title, body_format=fmt))
        except Exception:  # a plugin bug must not fail the tick
            log.exception("notify: sending to %s raised", _mask(url))
            ok = False
        if not ok:
            log.warning("notify: sending %r to %s failed", msg.title, _mask(url))
        self.deliveries.append(Delivery(channel, language, msg.title, ok, _mask(url)))
        return ok

    # -- what a notice says -------------------------------------------------------------------
    def _web(self) -> str:
        return self.links.base_url if self.links else ""

    def context(self, notice: Notice) -> dict[str, Any]:
        """Everything the templates may use, from the notice and the state store."""
        ctx: dict[str, Any] = {
            "notice": notice,
            "user": notice.owner.user if notice.owner else "",
            "team": notice.owner.team if notice.owner else "",
            "workload_id": notice.workload_id,
            "workload": notice.workload_id,
            "level": notice.level.label,
            "stopping": notice.level >= Level.GRACEFUL_STOP,
            "dry_run": notice.subject.startswith("[dry-run]"),
            "currency": self.currency,
            "finding": None,
            "gpus": [],
            "next_step": "",
            "next_at": None,
            "snooze_url": "",
            "appeal_url": "",
            "snooze_hours": min(24.0, self.policy.snooze.max_hours),
            "approval": None,
            "approve_url": "",
            "reject_url": "",
            "web": self._web(),
            "workload_url": f"{self._web()}/workloads/{notice.workload_id}" if self._web() else "",
            # Jobs waiting for the workload's GPU model, read back from the decision's reason.
            "demand": said(notice.body, notice.at),
            #: The workload's GPU failed: the notice explains, it never threatens a stop.
            "fault": False,
        }
        ctx.update(interruption_context(notice) if is_interruption(notice) else {})
        if self.store is None:
            return ctx
        info = self.store.workload_info(notice.workload_id)
        if info is not None:
            ctx["workload"] = info.name
            ctx["gpus"] = list(info.gpu_uuids)
        episodes = [e for e in self.store.findings_for(notice.workload_id) if e.ended_at is None]
        faults = [e for e in episodes if health_of(e.finding) is Health.FAILED]
        ctx["fault"] = bool(faults)
        if episodes:
            ctx["finding"] = _finding_context((faults or episodes)[-1])
        ctx["next_step"], ctx["next_at"] = self._next_step(notice)
        if ctx["demand"] is not None and ctx["demand"].reclaim_at and ctx["next_step"] == "graceful-stop":
            ctx["next_at"] = ctx["demand"].reclaim_at  # demand brought the stop forward
        to = notice.owner.user if notice.owner else "admins"
        if self.links is not None and notice.owner is not None:
            hours = ctx["snooze_hours"]
            ctx["snooze_url"] = self.links.snooze_url(notice.workload_id, hours=hours, to=to, now=notice.at)
            if ctx["stopping"] and not ctx["dry_run"]:  # only a real stop can be a false kill
                ctx["appeal_url"] = self.links.appeal_url(notice.workload_id, to=to, now=notice.at)
        if notice.owner is None and notice.dedup_key:
            pending = [
                a
                for a in self.store.approvals(ApprovalStatus.PENDING, limit=500)
                if a.idempotency_key == notice.dedup_key
            ]
            if pending:
                ctx["approval"] = pending[-1]
                if self.links is not None:
                    ctx["approve_url"] = self.links.approve_url(pending[-1].id, to=to, now=notice.at)
                    ctx["reject_url"] = self.links.reject_url(pending[-1].id, to=to, now=notice.at)
        return ctx

    def _next_step(self, notice: Notice) -> tuple[str, datetime | None]:
        """What the ladder does next for this workload, and from when (None: nothing planned)."""
        assert self.store is not None
        ladder = self.store.load_ladders(self.dry_run).get(notice.workload_id)
        lad = self.policy.ladder
        if ladder is None or notice.level >= Level.FORCE:
            return "", None
        if ladder.step in ("", "warn-1", "warn-2"):
            base = ladder.first_warned_at or notice.at
            return "graceful-stop", base + timedelta(minutes=lad.graceful_stop_after_minutes)
        if ladder.step == "graceful-stop":
            base = ladder.step_at or notice.at
            return "force", base + timedelta(minutes=lad.force_after_minutes)
        return "", None


_UTIL = ("mean(gpu_util_pct", "max(gpu_util_pct", "last(gpu_util_pct")
_MEM = ("last(mem_used_mib", "mean(mem_used_mib", "max(mem_used_mib")


def _finding_context(episode: Any) -> dict[str, Any]:
    f = episode.finding
    # Evidence is keyed by the rule's aggregate text; NaN (v != v) is a reading the source lacked.
    util = [v for k, per in f.evidence.items() if k.startswith(_UTIL) for v in per.values() if v == v]
    mem = [v for k, per in f.evidence.items() if k.startswith(_MEM) for v in per.values() if v == v]
    return {
        "rule": f.rule,
        "kind": f.kind,
        "message": f.message,
        "gpus": list(f.gpu_uuids),
        "util_pct": round(max(util), 1) if util else None,
        "mem_gib": round(sum(mem) / 1024, 1) if mem else None,
        "minutes": round(max(f.wasted_minutes, 0.0)),
        "since": episode.first_seen_at,
        "cost": round(f.wasted_cost, 2),
        "gpu_hours": round(f.wasted_gpu_hours, 2),
    }


def notifier_from_settings(
    settings: NotifySettings,
    store: TickStore | None,
    *,
    policy: PolicySettings | None = None,
    links: LinkSigner | None = None,
    currency: str = "USD",
    dry_run: bool = True,
) -> AppriseNotifier | None:
    """An ``AppriseNotifier`` when any route is configured, else None (the caller logs)."""
    if not settings.configured:
        return None
    return AppriseNotifier(settings, store, policy=policy, links=links, currency=currency, dry_run=dry_run)
