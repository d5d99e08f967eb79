"""The JSON API and the pages' auth: tokens and roles, sessions, CSRF, and the data they show,
on a state database written by two simulated hours of the real loop."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpusteward.analysis.rules import load_rule_pack
from gpusteward.domain.models import ApprovalStatus
from gpusteward.store.access import AccessStore
from gpusteward.store.dbschema import api_tokens_t
from gpusteward.web.app import create_web_app
from gpusteward.web.live import Attached

from .conftest import Demo, bearer, covered_slices, login

READS = [
    "/api/v1/me",
    "/api/v1/overview",
    "/api/v1/findings",
    "/api/v1/actions",
    "/api/v1/audit",
    "/api/v1/approvals",
    "/api/v1/rules",
    "/api/v1/settings",
    "/api/v1/openapi.json",
]
PAGES = ["/", "/findings", "/actions", "/audit", "/approvals", "/rules", "/settings", "/partials/overview"]


@pytest.mark.parametrize("path", READS)
def test_api_without_a_token_is_401(client: TestClient, path: str) -> None:
    resp = client.get(path)
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
    assert set(resp.json()) == {"error"}  # nothing but the refusal


@pytest.mark.parametrize("path", ["/api/v1/pause", "/api/v1/resume", "/api/v1/approvals/1/approve"])
def test_api_writes_without_a_token_are_401(client: TestClient, path: str) -> None:
    assert client.post(path, json={"reason": "x"}).status_code == 401


def test_a_wrong_or_revoked_token_is_401(demo: Demo, client: TestClient) -> None:
    assert client.get("/api/v1/me", headers=bearer("gst_not-a-real-token")).status_code == 401
    assert client.get("/api/v1/me", headers={"authorization": "Basic abc"}).status_code == 401
    access = AccessStore(demo.store)
    _, token = access.create_token("short-lived", "viewer", at=demo.clock.now())
    assert client.get("/api/v1/me", headers=bearer(token)).json()["name"] == "short-lived"
    access.revoke("short-lived", by="test", at=demo.clock.now())
    assert client.get("/api/v1/me", headers=bearer(token)).status_code == 401


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_users_only_see_the_login_page(client: TestClient, path: str) -> None:
    resp = client.get(path, follow_redirects=False)
    assert resp.status_code == 303
    assert resp.headers["location"].startswith("/login?next=")
    page = client.get(path)
    assert "Log in" in page.text
    assert "Findings</a>" not in page.text  # no navigation, no data


def test_tokens_are_stored_hashed(demo: Demo) -> None:
    with demo.store.transaction("read") as conn:
        rows = conn.execute(select(api_tokens_t)).all()
    stored = " ".join(str(v) for r in rows for v in r)
    for token in demo.tokens.values():
        assert token not in stored
        assert token.startswith("gst_")
        assert len(token) > 40


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_reads_every_page_and_api(demo: Demo, role: str) -> None:
    with TestClient(demo.app()) as c:
        for path in READS:
            assert c.get(path, headers=bearer(demo.tokens[role])).status_code == 200, path
        login(c, demo.tokens[role])
        for path in PAGES:
            resp = c.get(path)
            assert resp.status_code == 200, path
            if not path.startswith("/partials/"):
                assert 'id="mode"' in resp.text
                assert "ENFORCE" in resp.text


def test_viewer_cannot_approve_pause_or_snooze(demo: Demo, client: TestClient) -> None:
    viewer = bearer(demo.tokens["viewer"])
    pending = demo.store.approvals(ApprovalStatus.PENDING)
    assert pending
    resp = client.post(f"/api/v1/approvals/{pending[0].id}/approve", json={"reason": "ok"}, headers=viewer)
    assert resp.status_code == 403
    assert client.post("/api/v1/pause", json={"reason": "x"}, headers=viewer).status_code == 403
    wid = pending[0].workload_id
    snooze = client.post(f"/api/v1/workloads/{wid}/snooze", json={"hours": 1, "reason": "x"}, headers=viewer)
    assert snooze.status_code == 403
    assert demo.store.approvals(ApprovalStatus.PENDING) == pending  # nothing changed
    assert not demo.store.is_paused()
    # and through the pages, with a valid CSRF token
    csrf = login(client, demo.tokens["viewer"])
    page = client.post("/settings/pause", data={"csrf": csrf, "paused": "1"}, follow_redirects=False)
    assert page.status_code == 403
    assert not demo.store.is_paused()


def test_operator_pauses_and_resumes_through_the_api(demo: Demo, client: TestClient) -> None:
    op = bearer(demo.tokens["operator"])
    assert client.post("/api/v1/pause", json={"reason": "maintenance"}, headers=op).json() == {"paused": True}
    state = demo.store.pause_state()
    assert state.paused
    assert state.by == "operator-1"
    assert state.reason == "maintenance"
    assert client.get("/api/v1/settings", headers=op).json()["paused"] is True
    assert client.post("/api/v1/resume", headers=op).json() == {"paused": False}
    assert not demo.store.is_paused()
    events = [r.event for r in demo.store.audit_log(limit=5)]
    assert events[-2:] == ["paused", "resumed"]


def test_forms_need_the_session_csrf_token(demo: Demo, client: TestClient) -> None:
    csrf = login(client, demo.tokens["operator"])
    missing = client.post("/settings/pause", data={"paused": "1"}, follow_redirects=False)
    assert missing.status_code == 403
    wrong = client.post("/settings/pause", data={"paused": "1", "csrf": csrf + "x"}, follow_redirects=False)
    assert wrong.status_code == 403
    # The API with the session cookie needs it too (htmx sends it as a header) …
    assert client.post("/api/v1/pause", json={}).status_code == 403
    assert not demo.store.is_paused()
    # … and with it, the change is made.
    ok = client.post("/settings/pause", data={"paused": "1", "csrf": csrf}, follow_redirects=False)
    assert ok.status_code == 303
    assert demo.store.is_paused()
    assert client.post("/api/v1/resume", json={}, headers={"x-csrf-token": csrf}).status_code == 200
    assert not demo.store.is_paused()


def test_login_needs_its_csrf_cookie(demo: Demo, client: TestClient) -> None:
    resp = client.post(
        "/login", data={"token": demo.tokens["admin"], "csrf": "forged"}, follow_redirects=False
    )
    assert resp.status_code == 403
    client.get("/login")
    bad = client.post(
        "/login",
        data={"token": "gst_wrong", "csrf": client.cookies.get("gst_login_csrf") or ""},
        follow_redirects=False,
    )
    assert bad.status_code == 303
    assert "error=" in bad.headers["location"]
    assert client.get("/", follow_redirects=False).status_code == 303  # still anonymous


def test_a_tampered_session_cookie_is_anonymous(demo: Demo, client: TestClient) -> None:
    login(client, demo.tokens["admin"])
    cookie = client.cookies.get("gst_session") or ""
    body, mac = cookie.split(".")
    client.cookies.set("gst_session", body[:-2] + ("AA" if body[-2:] != "AA" else "BB") + "." + mac)
    assert client.get("/", follow_redirects=False).status_code == 303


def test_overview_has_money_actions_and_utilisation(demo: Demo, client: TestClient) -> None:
    ov = client.get("/api/v1/overview", headers=bearer(demo.tokens["viewer"])).json()
    assert ov["mode"] == "enforce"
    assert ov["open_findings"] == len(demo.store.open_findings()) > 0
    assert ov["idle_gpus"] > 0
    assert ov["waste_cost_per_hour"] > 0
    assert sum(d["cost"] for d in ov["waste_cost_per_day"]) > 0
    assert sum(ov["actions_24h"].values()) == len(demo.store.actions(limit=1000))
    util = [u["pct"] for u in ov["utilisation"] if u["pct"] is not None]
    assert len(util) >= covered_slices(demo.settings)
    assert all(0 <= u <= 100 for u in util)
    # Slices from before the run have no data and say so: no data is not 0 %.
    assert [u["pct"] is None for u in ov["utilisation"]] == [True] * (12 - len(util)) + [False] * len(util)
    page = client.get("/", headers=bearer(demo.tokens["viewer"]))
    for chart in ("chart-utilisation", "chart-money", "chart-actions", "chart-efficiency"):
        assert f'id="{chart}"' in page.text
    assert page.text.count('class="point"') >= covered_slices(demo.settings)  # the line has its points


def test_findings_filter_by_kind_owner_team_node(demo: Demo, client: TestClient) -> None:
    h = bearer(demo.tokens["viewer"])
    rows = client.get("/api/v1/findings?status=all", headers=h).json()
    assert rows
    first = rows[0]
    for key, field in (("kind", "kind"), ("owner", "user"), ("team", "team")):
        value = first[field]
        got = client.get(f"/api/v1/findings?status=all&{key}={value}", headers=h).json()
        assert got
        assert all(r[field] == value for r in got)
        assert len(got) <= len(rows)
    node = first["nodes"][0]
    by_node = client.get(f"/api/v1/findings?status=all&node={node}", headers=h).json()
    assert by_node
    assert all(node in r["nodes"] for r in by_node)
    assert client.get("/api/v1/findings?kind=no-such-kind", headers=h).json() == []


def test_workload_detail_has_evidence_and_history(demo: Demo, client: TestClient) -> None:
    h = bearer(demo.tokens["viewer"])
    wid = demo.store.actions(limit=1)[0].workload_id
    w = client.get(f"/api/v1/workloads/{wid}", headers=h).json()
    assert w["workload"]["id"] == wid
    assert w["findings"]
    assert w["decisions"]
    assert w["actions"]
    page = client.get(f"/workloads/{wid}", headers=h)
    assert page.status_code == 200
    assert page.text.count("<svg") >= 2  # utilisation and memory over time, evidence
    assert client.get("/api/v1/workloads/job-none", headers=h).status_code == 404


def test_actions_and_audit_search_and_export(demo: Demo, client: TestClient) -> None:
    h = bearer(demo.tokens["viewer"])
    everything = client.get("/api/v1/actions?limit=10000", headers=h).json()
    assert everything
    step = everything[0]["step"]
    found = client.get(f"/api/v1/actions?q={step}", headers=h).json()
    assert found
    assert all(step in str(r) for r in found)
    exported = client.get("/api/v1/actions?format=csv&limit=10000", headers=h)
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert len(rows) == len(everything)
    assert {r["id"] for r in rows} == {str(a["id"]) for a in everything}
    audit = client.get("/api/v1/audit?event=paus&format=csv", headers=h)
    assert audit.status_code == 200
    assert audit.text.startswith("id,at,event")


def test_openapi_document_lists_the_api(demo: Demo, client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json", headers=bearer(demo.tokens["viewer"])).json()
    paths = set(doc["paths"])
    for p in (
        "/api/v1/findings",
        "/api/v1/pause",
        "/api/v1/approvals/{approval_id}/approve",
        "/api/v1/overview",
    ):
        assert p in paths
    assert not any(p in paths for p in ("/", "/login", "/findings"))  # pages are not API


def test_rule_preview_validates_and_flags_what_is_idle_now(demo: Demo, client: TestClient) -> None:
    h = bearer(demo.tokens["viewer"])
    bad = client.post(
        "/api/v1/rules/preview",
        json={"text": "rules:\n  - name: x\n    kind: idle\n    when: mean(gpu_util_pct, 30m) <\n"},
        headers=h,
    )
    assert bad.status_code == 422
    assert bad.json()["valid"] is False
    assert bad.json()["line"] == 4
    text = "rules:\n  - name: anything-idle\n    kind: idle\n    when: mean(gpu_util_pct, 10m) < 5\n"
    ok = client.post("/api/v1/rules/preview", json={"text": text}, headers=h).json()
    assert ok["valid"]
    assert ok["live"]
    zombies = {e.finding.workload_id for e in demo.store.open_findings() if e.finding.kind == "zombie"}
    flagged = {r["workload_id"] for r in ok["findings"]}
    assert zombies
    assert zombies <= flagged
    # the same through the page's htmx partial (needs CSRF with the session)
    csrf = login(client, demo.tokens["viewer"])
    part = client.post("/rules/preview", data={"text": text, "csrf": csrf})
    assert part.status_code == 200
    assert 'id="preview-findings"' in part.text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (  # "billion laughs": 9 levels of 9 aliases; refused at its first anchor, before expansion
            "a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "\n".join(
                f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + "\nrules: []\n",
            "anchors",
        ),
        ("a: &a [*a]\n", "anchors"),
        ("? {a: 1}\n: b\n", "plain value"),
        ("rules: []\nn: " + "9" * 310 + "\n", "64 bits"),
        ("rules:\n- name: r\n  kind: idle\n  when: x\n  when: y\n", "duplicate key"),
    ],
)
def test_hostile_rule_packs_get_a_reason_not_a_500(
    demo: Demo, client: TestClient, text: str, problem: str
) -> None:
    r = client.post("/api/v1/rules/preview", json={"text": text}, headers=bearer(demo.tokens["viewer"]))
    assert r.status_code == 422
    assert problem in r.json()["error"]


def test_oversized_bodies_are_refused_before_they_are_read(demo: Demo, client: TestClient) -> None:
    h = bearer(demo.tokens["viewer"])
    big = client.post("/api/v1/rules/preview", json={"text": "#" * 2_000_000}, headers=h)
    assert big.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams, cut at the limit
        yield b'{"text": "'
        for _ in range(300):
            yield b"#" * 10_000
        yield b'"}'

    streamed = client.post("/api/v1/rules/preview", content=chunks(), headers=h)
    assert streamed.status_code == 413


def test_saving_rules_needs_admin_and_a_rules_file(demo: Demo, tmp_path: Path) -> None:
    text = (
        "rules:\n  - name: zombie\n    kind: zombie\n"
        "    when: mean(gpu_util_pct, 30m) < 3 and last(mem_used_mib) > 1024\n"
    )
    with TestClient(demo.app()) as c:
        csrf = login(c, demo.tokens["admin"])
        assert c.post("/rules/save", data={"text": text, "csrf": csrf}).status_code == 409  # no rules_file
    target = tmp_path / "edited.yaml"
    web = demo.settings.web.model_copy(update={"rules_file": target})
    settings = demo.settings.model_copy(update={"web": web})
    app = create_web_app(
        demo.store, settings, demo.steward.rules, live=Attached(demo.steward), clock=demo.clock
    )
    with TestClient(app) as c:
        csrf = login(c, demo.tokens["operator"])
        assert c.post("/rules/save", data={"text": text, "csrf": csrf}).status_code == 403
        assert not target.exists()
        csrf = login(c, demo.tokens["admin"])
        broken = c.post("/rules/save", data={"text": text.replace("< 3", "<"), "csrf": csrf})
        assert broken.status_code == 422
        assert not target.exists()
        saved = c.post("/rules/save", data={"text": text, "csrf": csrf})
        assert saved.status_code == 200
        assert "list it under rules.files" in saved.text
    pack = load_rule_pack(target)
    assert [r.when for r in pack.rules] == ["mean(gpu_util_pct, 30m) < 3 and last(mem_used_mib) > 1024"]
    assert demo.store.audit_log(limit=1)[0].event == "rules.edited"
