"""One-click links: HMAC-signed, expiring, single use; tampered, expired, reused or foreign links
are refused, and a good one approves or snoozes through the web app."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from gpusteward.domain.models import ApprovalStatus
from gpusteward.notify.links import LinkError, LinkSigner, sign, verify
from gpusteward.store.access import AccessStore

from .conftest import Demo

KEY = b"k" * 32
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_sign_and_verify_round_trip() -> None:
    token = sign(KEY, "link", {"do": "snooze", "workload": "job-1"}, expires=NOW + timedelta(hours=1))
    claims = verify(KEY, "link", token, now=NOW)
    assert claims["do"] == "snooze"
    assert claims["workload"] == "job-1"
    assert claims["exp"] == int((NOW + timedelta(hours=1)).timestamp())
    assert claims["n"]


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda t: t.replace(".", "x.", 1), "signature"),  # body changed
        (lambda t: t[:-3] + ("AAA" if t[-3:] != "AAA" else "BBB"), "signature"),  # MAC changed
        (lambda t: t.split(".")[0], "not a signed link"),
        (lambda t: "", "not a signed link"),
    ],
)
def test_tampered_tokens_are_refused(mutate: object, why: str) -> None:
    token = sign(KEY, "link", {"do": "approve", "approval": 1}, expires=NOW + timedelta(hours=1))
    with pytest.raises(LinkError, match=why):
        verify(KEY, "link", mutate(token), now=NOW)  # type: ignore[operator]


def test_expired_foreign_and_other_purpose_tokens_are_refused() -> None:
    token = sign(KEY, "link", {"do": "approve", "approval": 1}, expires=NOW + timedelta(minutes=5))
    with pytest.raises(LinkError, match="expired"):
        verify(KEY, "link", token, now=NOW + timedelta(minutes=5))
    with pytest.raises(LinkError, match="signature"):
        verify(b"other-key" * 4, "link", token, now=NOW)
    with pytest.raises(LinkError, match="signature"):
        verify(KEY, "session", token, now=NOW)  # a link is never a session cookie


def _path(url: str) -> str:
    return urlsplit(url).path


def _confirm(c: TestClient, path: str, reason: str = "") -> tuple[int, str]:
    form = c.get(path)
    if form.status_code != 200:
        return form.status_code, form.text
    resp = c.post(path, data={"csrf": c.cookies.get("gst_login_csrf") or "", "reason": reason})
    return resp.status_code, resp.text


def _signer(demo: Demo) -> LinkSigner:
    return demo.app().state.web.links


def test_an_approve_link_works_once_without_login(demo: Demo) -> None:
    pending = demo.store.approvals(ApprovalStatus.PENDING)[0]
    url = _signer(demo).approve_url(pending.id, to="admins", now=demo.clock.now())
    assert url.startswith("http://127.0.0.1:8080/l/")  # web.base_url unset: web.listen
    with TestClient(demo.app()) as c:
        page = c.get(_path(url))
        assert page.status_code == 200
        assert f"approve approval request {pending.id}" in page.text
        status, text = _confirm(c, _path(url), "looks idle to me")
        assert status == 200, text
        decided = demo.store.approval(pending.id)
        assert decided is not None
        assert decided.status is ApprovalStatus.APPROVED
        assert decided.decided_by == "link:admins"
        assert decided.decision_reason == "looks idle to me"
        again = c.get(_path(url))
        assert again.status_code == 409
        assert "used already" in again.text
        post_again = c.post(_path(url), data={"csrf": c.cookies.get("gst_login_csrf") or ""})
        assert post_again.status_code == 409
    nonce = verify(_signer(demo).key, "link", _path(url).rsplit("/", 1)[1], now=demo.clock.now())["n"]
    assert AccessStore(demo.store).link_used(nonce)


def test_a_snooze_link_snoozes_the_workload(demo: Demo) -> None:
    wid = demo.store.actions(limit=1)[0].workload_id
    url = _signer(demo).snooze_url(wid, hours=2, to="alice", now=demo.clock.now())
    with TestClient(demo.app()) as c:
        status, text = _confirm(c, _path(url))
    assert status == 200, text
    snoozed = demo.store.active_snoozes(demo.clock.now())
    assert wid in snoozed
    assert snoozed[wid].by == "link:alice"


def test_tampered_expired_and_foreign_links_are_refused(demo: Demo) -> None:
    pending = demo.store.approvals(ApprovalStatus.PENDING)
    signer = _signer(demo)
    now = demo.clock.now()
    good = _path(signer.reject_url(1, to="admins", now=now))
    body, mac = good.rsplit("/", 1)[1].split(".")
    forged = sign(signer.key, "link", {"do": "approve", "approval": 1}, expires=now + timedelta(hours=1))
    tampered = f"/l/{forged.split('.')[0]}.{mac}"  # another body under the good link's MAC
    expired = _path(
        signer.approve_url(1, to="admins", now=now - timedelta(hours=signer.ttl_hours, seconds=1))
    )
    foreign = _path(LinkSigner(b"not-our-key" * 3, "http://x").approve_url(1, to="admins", now=now))
    with TestClient(demo.app()) as c:
        for path, why in ((tampered, "signature"), (expired, "expired"), (foreign, "signature")):
            page = c.get(path)
            assert page.status_code == 403, path
            assert why in page.text, path
            resp = c.post(path, data={"csrf": c.cookies.get("gst_login_csrf") or "x"})
            assert resp.status_code == 403
        # a good link without the form's CSRF value does nothing
        c.get(good)
        assert c.post(good, data={"csrf": "forged"}).status_code == 403
    assert demo.store.approvals(ApprovalStatus.PENDING) == pending
    assert not AccessStore(demo.store).link_used(verify(signer.key, "link", f"{body}.{mac}", now=now)["n"])
