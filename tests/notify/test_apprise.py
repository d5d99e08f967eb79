"""Notices through apprise to real receivers: e-mail to an aiosmtpd server, and Slack, DingTalk and
WeCom through apprise's own plugins to a local HTTP server that checks each service's payload.
Routing per owner, team and default; admins get approval requests and digests; en and zh."""

from __future__ import annotations

import email
import email.policy
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gpusteward.domain.models import (
    Decision,
    Finding,
    LadderState,
    Level,
    Notice,
    Owner,
    RuleAction,
    Workload,
    WorkloadKind,
)
from gpusteward.notify.apprise_notifier import CHANNELS, AppriseNotifier, Templates, channel_of
from gpusteward.notify.links import LinkSigner, verify
from gpusteward.notify.settings import NotifySettings
from gpusteward.notify.templates import notice_for
from gpusteward.store.db import StateStore

from .conftest import Mailbox, Receiver

pytest.importorskip("apprise")

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
KEY = b"notify-test-key-0123456789abcdef"
ALICE = Owner("alice", "ml-research", "alice@example.com")
BOB = Owner("bob", "vision", "bob@example.com")
SLACK = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"
DINGTALK = "dingtalk://a1b2c3d4e5f6/"
WECOM = "wecombot://botkey123/"


def _workload(wid: str, owner: Owner) -> Workload:
    return Workload(
        wid, WorkloadKind.JOB, f"train-{owner.user}", owner, 1, ("GPU-a",), started_at=T - timedelta(hours=3)
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    """A workload with an open zombie finding 45 min long and a ladder at its first warning."""
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    for w in (_workload("job/42", ALICE), _workload("job/43", BOB)):
        s.remember_workloads([w], T)
        finding = Finding(
            rule="zombie",
            kind="zombie",
            action=RuleAction.RECLAIM,
            at=T,
            gpu_uuids=("GPU-a",),
            workload_id=w.id,
            evidence={"mean(gpu_util_pct, 30m)": {"GPU-a": 0.4}, "last(mem_used_mib)": {"GPU-a": 38912.0}},
            wasted_minutes=45,
            wasted_gpu_hours=0.75,
            wasted_cost=3.0,
            message="node-7/gpu3 averaged 0.4% GPU utilisation for 45 min while holding 38 GiB",
        )
        s.record_findings([finding], T)
        ladder = LadderState(
            w.id,
            w.incarnation,
            "zombie",
            T - timedelta(minutes=45),
            T,
            "warn-1",
            T - timedelta(minutes=5),
            T - timedelta(minutes=5),
        )
        s.update_ladders([ladder], (), dry_run=False)
    yield s
    s.close()


def _notice(owner: Owner, wid: str = "job/42", level: Level = Level.NOTIFY) -> Notice:
    step = {Level.NOTIFY: "warn-1", Level.GRACEFUL_STOP: "graceful-stop"}[level]
    d = Decision(
        wid,
        T,
        level,
        step,
        "zombie: idle for 45 min",
        rule="zombie",
        gpu_uuids=("GPU-a",),
        idempotency_key=f"{wid}:1:{step}",
    )
    return notice_for(d, _workload(wid, owner), dry_run=False)


def _notifier(store: StateStore, **routes: Any) -> AppriseNotifier:
    links = LinkSigner(KEY, "https://steward.example.com", ttl_hours=24)
    return AppriseNotifier(NotifySettings(**routes), store, links=links, currency="EUR", dry_run=False)


@pytest.fixture
def local_webhooks(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Receiver:
    """Point apprise's Slack, DingTalk and WeCom plugins at the local receiver (their endpoints are
    fixed public hosts); everything else about the request is apprise's own."""
    from apprise.plugins.dingtalk import NotifyDingTalk
    from apprise.plugins.slack import NotifySlack
    from apprise.plugins.wecombot import NotifyWeComBot

    monkeypatch.setattr(NotifySlack, "webhook_url", receiver.url + "/slack")
    monkeypatch.setattr(NotifyDingTalk, "notify_url", receiver.url + "/dingtalk?access_token={token}")
    monkeypatch.setattr(NotifyWeComBot, "notify_url", receiver.url + "/wecom?key={key}")
    return receiver


def _smtp_url(box: Mailbox, to: str = "{contact}") -> str:
    return f"mailto://127.0.0.1:{box.port}?from=steward@example.com&to={to}&mode=insecure"


def _parts(raw: bytes) -> dict[str, str]:
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    out = {"subject": str(msg["subject"]), "to": str(msg["to"])}
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            out[part.get_content_subtype()] = part.get_content()
    return out


def test_owner_email_says_what_when_and_how_to_snooze(store: StateStore, smtp: Mailbox) -> None:
    notifier = _notifier(store, default={"urls": [_smtp_url(smtp)]})
    notifier.send(_notice(ALICE))
    assert [d.ok for d in notifier.deliveries] == [True]
    assert len(smtp.messages) == 1
    env = smtp.messages[0]
    assert env.rcpt_tos == ["alice@example.com"]
    mail = _parts(env.content)
    assert mail["subject"] == "Idle GPUs held by train-alice"
    html = mail["html"]
    for fact in ("node-7/gpu3", "utilisation 0.4 %", "memory held 38.0 GiB", "for 45 min", "3.00 EUR"):
        assert fact in html, fact
    # next step: graceful stop 30 min after the first warning (5 min ago)
    assert f"{(T + timedelta(minutes=25)):%Y-%m-%d %H:%M} UTC" in html
    href = html.split('href="', 1)[1].split('"', 1)[0]
    assert href.startswith("https://steward.example.com/l/")
    claims = verify(KEY, "link", urlsplit(href.replace("&amp;", "&")).path.rsplit("/", 1)[1], now=T)
    assert claims["do"] == "snooze"
    assert claims["workload"] == "job/42"
    assert claims["to"] == "alice"
    assert "gpusteward.io/protect=true" in html


def test_slack_dingtalk_wecom_payload_shapes(store: StateStore, local_webhooks: Receiver) -> None:
    notifier = _notifier(store, teams={"ml-research": {"urls": [SLACK, DINGTALK, WECOM]}})
    notifier.send(_notice(ALICE))
    assert [d.ok for d in notifier.deliveries] == [True, True, True]
    by_path = {r.path.split("?")[0].split("/")[1]: r for r in local_webhooks.requests}
    assert set(by_path) == {"slack", "dingtalk", "wecom"}

    slack = by_path["slack"]
    assert slack.path == "/slack/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"
    assert slack.headers["content-type"].startswith("application/json")
    (att,) = slack.body["attachments"]
    assert att["title"] == "Idle GPUs held by train-alice"
    assert "*What we saw:*" in att["text"]  # markdown bold became Slack mrkdwn
    assert "<https://steward.example.com/l/" in att["text"]
    assert "|Snooze 24 h>" in att["text"]

    ding = by_path["dingtalk"]
    assert ding.path == "/dingtalk?access_token=a1b2c3d4e5f6"
    assert ding.body["msgtype"] == "markdown"
    assert ding.body["markdown"]["title"] == "Idle GPUs held by train-alice"
    assert "**What we saw.**" in ding.body["markdown"]["text"]
    assert "[Snooze it for 24 h](https://steward.example.com/l/" in ding.body["markdown"]["text"]

    wecom = by_path["wecom"]
    assert wecom.path == "/wecom?key=botkey123"
    assert wecom.body["msgtype"] == "text"
    content = wecom.body["text"]["content"]
    assert "What we saw: node-7/gpu3" in content
    assert "**" not in content
    assert "https://steward.example.com/l/" in content


def test_routing_owner_then_team_then_default(
    store: StateStore, local_webhooks: Receiver, smtp: Mailbox
) -> None:
    notifier = _notifier(
        store,
        owners={"alice": [DINGTALK]},
        teams={"ml-research": [SLACK], "vision": [WECOM]},
        default=_smtp_url(smtp),
    )
    notifier.send(_notice(ALICE))  # owner route wins over her team's
    notifier.send(_notice(BOB, "job/43"))  # team route
    notifier.send(_notice(Owner("carol", "", "carol@example.com")))  # neither: default (e-mail)
    paths = [r.path.split("?")[0] for r in local_webhooks.requests]
    assert paths == ["/dingtalk", "/wecom"]
    assert [m.rcpt_tos for m in smtp.messages] == [["carol@example.com"]]


def test_chinese_route_gets_chinese_templates(
    store: StateStore, local_webhooks: Receiver, smtp: Mailbox
) -> None:
    notifier = _notifier(
        store,
        teams={"ml-research": {"urls": [DINGTALK, _smtp_url(smtp)], "language": "zh"}},
    )
    notifier.send(_notice(ALICE, level=Level.GRACEFUL_STOP))
    ding = local_webhooks.requests[0].body["markdown"]
    assert ding["title"] == "正在停止 train-alice"
    assert "发现的情况" in ding["text"]
    assert "利用率 0.4 %" in ding["text"]
    assert "暂缓 24 小时" in ding["text"]
    mail = _parts(smtp.messages[0].content)
    assert mail["subject"] == "正在停止 train-alice"
    assert "接下来会发生什么" in mail["html"]


def test_admins_get_approval_requests_with_one_click_links(
    store: StateStore, local_webhooks: Receiver
) -> None:
    d = Decision("job/42", T, Level.GRACEFUL_STOP, "graceful-stop", "idle 45 min", rule="zombie",
                 gpu_uuids=("GPU-a",), idempotency_key="job/42:1:graceful-stop")  # fmt: skip
    approval = store.request_approval(d, dry_run=False, at=T, ttl=timedelta(hours=2))
    notifier = _notifier(store, admins=[DINGTALK], default=[SLACK])
    notifier.send(
        Notice(T, "job/42", None, "approval needed", "body", Level.GRACEFUL_STOP, d.idempotency_key)
    )
    (req,) = local_webhooks.requests
    assert req.path.startswith("/dingtalk")
    text = req.body["markdown"]["text"]
    assert req.body["markdown"]["title"] == "Approval needed: graceful-stop of train-alice"
    links = [part.split(")", 1)[0] for part in text.split("](")[1:]]
    approve, reject = links[0], links[1]
    claims = verify(KEY, "link", urlsplit(approve).path.rsplit("/", 1)[1], now=T)
    assert (claims["do"], claims["approval"], claims["to"]) == ("approve", approval.id, "admins")
    assert verify(KEY, "link", urlsplit(reject).path.rsplit("/", 1)[1], now=T)["do"] == "reject"


def test_digest_lists_the_notices(store: StateStore, local_webhooks: Receiver) -> None:
    notifier = _notifier(store, admins=[DINGTALK])
    notifier.send_digest([_notice(ALICE), _notice(BOB, "job/43")], at=T)
    body = local_webhooks.requests[0].body["markdown"]
    assert body["title"] == "gpusteward digest: 2 notices"
    assert "`job/42` (alice, ml-research)" in body["text"]
    assert "`job/43` (bob, vision)" in body["text"]


def test_no_route_sends_nothing_and_a_dead_channel_does_not_raise(store: StateStore) -> None:
    quiet = _notifier(store, teams={"other": [SLACK]})
    quiet.send(_notice(ALICE))
    assert quiet.deliveries == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # nothing listens there once closed
    broken = _notifier(store, default=f"json://127.0.0.1:{dead}/hook")
    broken.send(_notice(ALICE))
    assert [d.ok for d in broken.deliveries] == [False]
    assert broken.deliveries[0].target == "json://…"  # URLs carry secrets: never logged whole


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("channel", sorted(set(CHANNELS.values()) | {"md"}))
@pytest.mark.parametrize("kind", ["owner", "admin"])
def test_every_template_renders_with_and_without_store_facts(kind: str, channel: str, language: str) -> None:
    notifier = AppriseNotifier(NotifySettings(), None)
    ctx = notifier.context(_notice(ALICE))
    out = Templates().render(kind, channel, language, ctx)
    assert out.title
    assert out.body
    assert (
        ("您好" in out.body or kind == "admin")
        if language == "zh"
        else "Hello" in out.body or kind == "admin"
    )


def test_channel_of_url_schemes() -> None:
    assert channel_of("mailtos://u:p@smtp.example.com") == "html"
    assert channel_of("SLACK://a/b/c") == "slack"
    assert channel_of("lark://token") == "text"
    assert channel_of("ntfy://topic") == "md"


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("channel", sorted(set(CHANNELS.values()) | {"md"}))
def test_a_stop_notice_carries_a_signed_appeal_link_and_a_warning_does_not(
    store: StateStore, channel: str, language: str
) -> None:
    notifier = _notifier(store)
    stop = notifier.context(_notice(ALICE, level=Level.GRACEFUL_STOP))
    body = Templates().render("owner", channel, language, stop).body
    url = stop["appeal_url"]
    assert url
    assert url in body.replace("&amp;", "&")
    claims = verify(KEY, "link", urlsplit(url).path.rsplit("/", 1)[1], now=T)
    assert (claims["do"], claims["workload"], claims["to"]) == ("appeal", "job/42", "alice")
    warn = notifier.context(_notice(ALICE))
    assert warn["appeal_url"] == ""
    warned = Templates().render("owner", channel, language, warn).body
    tokens = re.findall(r"/l/([\w-]+\.[\w-]+)", warned)
    assert tokens  # the snooze link
    assert all(verify(KEY, "link", t, now=T)["do"] != "appeal" for t in tokens)
