"""The hub's pages and JSON over its PostgreSQL store, filled through ``record_pull`` as a pull
would: never-pulled members show no figures (not zeros), members' text is escaped, every
response carries the CSP, the weekly report sums the last 7 days, showback sums per team."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from tests.hub.conftest import hub_settings

from gpusteward.hub.access import COOKIE
from gpusteward.hub.app import create_hub_app
from gpusteward.hub.settings import HubSettings
from gpusteward.hub.store import HubStore, Pulled

NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
EVIL = '<script>alert("x")</script>'


def _settings(schema: str) -> HubSettings:
    return hub_settings(
        schema,
        [
            {"name": "alpha", "url": "http://alpha.example", "token": "t"},
            {
                "name": "beta",
                "url": "http://beta.example",
                "token": "t",
                "link_url": "https://beta.example/gs",
            },
        ],
    )


def _overview(**kw: Any) -> dict[str, Any]:
    days = [(NOW.date() - timedelta(days=k)).isoformat() for k in range(13, -1, -1)]
    return {
        "cluster": "alpha",
        "gpus": 16,
        "idle_gpus": 2,
        "waste_cost_per_hour": 5.0,
        "saved_cost_to_date": 40.0,
        "currency": "USD",
        "waste_cost_per_day": [{"day": d, "cost": 1.0} for d in days],
        "saved_cost_per_day": [{"day": d, "cost": 2.0} for d in days],
        "utilisation": [{"at": "11:00", "pct": 40.0}, {"at": "12:00", "pct": None}],
        **kw,
    }


@pytest.fixture
def client(hub_store: HubStore) -> Iterator[TestClient]:
    with TestClient(create_hub_app(_settings(hub_store.schema), hub_store, now=lambda: NOW)) as c:
        yield c


def test_never_pulled_members_show_no_figures(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    row = page.text.split('id="cluster-alpha"', 1)[1].split("</tr>", 1)[0]
    assert 'data-state="never"' in row
    assert '<td data-label="GPUs" class="gpus">-</td>' in row
    body = client.get("/api/v1/hub/overview").json()
    assert body["totals"]["gpus"] is None
    assert body["totals"]["never"] == 2


def test_member_text_is_escaped_and_links_go_to_the_member(client: TestClient, hub_store: HubStore) -> None:
    finding = {
        "id": 3,
        "rule": EVIL,
        "workload_id": "job/1",
        "message": EVIL,
        "last_seen_at": NOW.isoformat(),
    }
    rollout = [{"scope": "pilot-nlp", "stage": "notify", "days": 3.5, "findings": 4, "false_kills": 0,
                "appeals": 1, "ready_to_promote": False}]  # fmt: skip
    got = Pulled(overview=_overview(), findings=[finding], rollout=rollout)
    hub_store.record_pull("beta", "http://beta.example", NOW, got)
    assert "<td>pilot-nlp</td><td>notify</td><td>3.5</td>" in client.get("/clusters/beta").text
    for path in ("/findings", "/clusters/beta"):
        text = client.get(path).text
        assert EVIL not in text
        assert "&lt;script&gt;" in text
        assert 'href="https://beta.example/gs/workloads/job/1"' in text
    assert client.get("/clusters/nope").status_code == 404
    assert client.get("/api/v1/hub/clusters/nope").status_code == 404


def test_every_response_has_the_csp(client: TestClient) -> None:
    for path in ("/", "/findings", "/reports/weekly", "/api/v1/hub/overview", "/static/style.css", "/nope"):
        csp = client.get(path).headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp, path


def test_the_weekly_report_sums_seven_days(client: TestClient, hub_store: HubStore) -> None:
    hub_store.record_pull(
        "alpha", "http://alpha.example", NOW - timedelta(minutes=1), Pulled(overview=_overview())
    )
    body = client.get("/api/v1/hub/reports/weekly").json()
    alpha = next(c for c in body["clusters"] if c["name"] == "alpha")
    # 13 Nov 12:00 to 20 Nov: the days 13..20 are 8 day rows (the first one partly).
    assert (alpha["waste_cost_7d"], alpha["saved_cost_7d"]) == (8.0, 16.0)
    assert alpha["mean_util_pct"] == 40.0
    assert next(c for c in body["clusters"] if c["name"] == "beta")["waste_cost_7d"] is None


def test_showback_per_team_and_cluster(client: TestClient, hub_store: HubStore) -> None:
    def row(team: str, user: str, spend: float) -> dict[str, Any]:
        return {"day": "2026-11-02", "team": team, "user": user, "gpu_model": "A100", "rate": 2.5,
                "held_gpu_hours": 10.0, "used_gpu_hours": 4.0, "wasted_gpu_hours": 6.0,
                "reclaimed_gpu_hours": 1.0, "spend": spend, "power_cost": 0.5}  # fmt: skip

    sb = {"month": "2026-11", "closed": False, "currency": "USD",
          "rows": [row("nlp", "a", 25.0), row("nlp", "b", 5.0), row("vision", "c", 1.0)]}  # fmt: skip
    hub_store.record_pull(
        "alpha", "http://alpha.example", NOW, Pulled(overview=_overview(), showback={"2026-11": sb})
    )
    body = client.get("/api/v1/hub/reports/showback", params={"month": "2026-11"}).json()
    assert [(r["cluster"], r["team"], r["spend"], r["held_gpu_hours"]) for r in body["rows"]] == [
        ("alpha", "nlp", 30.0, 20.0),
        ("alpha", "vision", 1.0, 10.0),
    ]
    assert body["missing"] == ["beta"]
    assert client.get("/api/v1/hub/reports/showback", params={"month": "2026-13"}).status_code == 422
    page = client.get("/reports/showback", params={"month": "2026-11"}).text
    assert "<td>nlp</td>" in page


def test_with_a_token_every_page_and_api_route_needs_it(hub_store: HubStore) -> None:
    settings = _settings(hub_store.schema)
    settings.web.token = SecretStr("hub-s3cret")
    with TestClient(create_hub_app(settings, hub_store, now=lambda: NOW)) as c:
        refused = c.get("/api/v1/hub/overview")
        assert refused.status_code == 401
        assert "script-src 'self'" in refused.headers["content-security-policy"]
        assert c.get("/api/v1/hub/overview", headers={"authorization": "Bearer nope"}).status_code == 401
        assert (
            c.get("/api/v1/hub/overview", headers={"authorization": "Bearer hub-s3cret"}).status_code == 200
        )
        assert c.get("/", follow_redirects=False).headers["location"] == "/login"
        assert c.get("/healthz").status_code == 200
        assert c.get("/static/style.css").status_code == 200
        assert c.post("/login", data={"token": "nope"}).status_code == 401
        assert c.post("/login", content=b"token=x", headers={"content-type": "text/plain"}).status_code == 415
        done = c.post("/login", data={"token": "hub-s3cret"}, follow_redirects=False)
        assert done.status_code == 303
        cookie = done.cookies.get(COOKIE)
        assert cookie
        assert "hub-s3cret" not in cookie  # an HMAC of it, never the token
        assert c.get("/").status_code == 200  # the client keeps the cookie
        assert c.get("/findings").status_code == 200
        c.cookies.set(COOKIE, "f" * 64)
        assert c.get("/", follow_redirects=False).status_code == 303
