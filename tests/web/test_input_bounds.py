"""Hostile numbers and values in queries, paths and forms get 422 (JSON for the API, a page that
names the problem for the pages), never a 500; snoozes through the API need a reason and replace
one another (issue 22, items 12 and 15)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpusteward.domain.models import ApprovalStatus

from .conftest import Demo, bearer, login

HUGE = str(2**64)  # past any 64-bit column
NOT_ENUMS = [
    "/actions?level=abc",
    "/actions?status=abc",
    "/findings?status=abc",
]


@pytest.fixture
def lenient(demo: Demo) -> Iterator[TestClient]:
    """A client that answers server errors with their 500 instead of raising them."""
    with TestClient(demo.app(), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("listing", ["findings", "actions", "audit"])
@pytest.mark.parametrize("value", [HUGE, "9" * 40, "-" + HUGE])
def test_before_past_64_bits_is_422(demo: Demo, lenient: TestClient, listing: str, value: str) -> None:
    api = lenient.get(f"/api/v1/{listing}?before={value}", headers=bearer(demo.tokens["viewer"]))
    assert api.status_code == 422, api.text
    assert any("before" in p for p in api.json()["problems"])
    page = lenient.get(f"/{listing}?before={value}", headers=bearer(demo.tokens["viewer"]))
    assert page.status_code == 422, page.text[:300]
    assert page.headers["content-type"].startswith("text/html")
    assert "before" in page.text


def test_the_largest_64_bit_before_is_accepted(demo: Demo, lenient: TestClient) -> None:
    top = str(2**63 - 1)
    resp = lenient.get(f"/api/v1/actions?before={top}&limit=1", headers=bearer(demo.tokens["viewer"]))
    assert resp.status_code == 200
    assert len(resp.json()) == 1  # the newest action: every id is below the bound


def test_approval_ids_past_64_bits_are_422(demo: Demo, lenient: TestClient) -> None:
    op = bearer(demo.tokens["operator"])
    for verb in ("approve", "reject"):
        resp = lenient.post(f"/api/v1/approvals/{HUGE}/{verb}", json={"reason": "x"}, headers=op)
        assert resp.status_code == 422, resp.text
    zero = lenient.post("/api/v1/approvals/0/approve", json={"reason": "x"}, headers=op)
    assert zero.status_code == 422
    csrf = login(lenient, demo.tokens["operator"])
    page = lenient.post(f"/approvals/{HUGE}", data={"csrf": csrf, "decision": "approve"})
    assert page.status_code == 422, page.text[:300]
    assert page.headers["content-type"].startswith("text/html")
    assert "approval_id" in page.text


@pytest.mark.parametrize("url", NOT_ENUMS)
def test_unknown_enum_values_in_pages_are_422(demo: Demo, client: TestClient, url: str) -> None:
    resp = client.get(url, headers=bearer(demo.tokens["viewer"]))
    assert resp.status_code == 422, resp.text[:300]
    assert resp.headers["content-type"].startswith("text/html")
    assert url.split("?")[1].split("=")[0] in resp.text  # the page names the parameter


@pytest.mark.parametrize("url", ["/api/v1" + u for u in NOT_ENUMS] + ["/api/v1/approvals?status=abc"])
def test_unknown_enum_values_in_the_api_are_422(demo: Demo, client: TestClient, url: str) -> None:
    resp = client.get(url, headers=bearer(demo.tokens["viewer"]))
    assert resp.status_code == 422, resp.text


def test_known_and_empty_enum_values_still_filter(demo: Demo, client: TestClient) -> None:
    viewer = bearer(demo.tokens["viewer"])
    # The page forms send "" for "all".
    assert client.get("/actions?status=&level=", headers=viewer).status_code == 200
    rows = client.get("/api/v1/actions?level=L1&status=", headers=viewer).json()
    assert rows
    assert {r["level"] for r in rows} == {"L1"}
    decided = client.get("/api/v1/approvals?status=pending", headers=viewer).json()
    assert {r["status"] for r in decided} <= {"pending"}


def test_paused_takes_only_true_or_false(demo: Demo, client: TestClient) -> None:
    csrf = login(client, demo.tokens["operator"])
    assert not demo.store.is_paused()
    for bad in ("maybe", "", "yes", "2"):
        resp = client.post("/settings/pause", data={"csrf": csrf, "paused": bad}, follow_redirects=False)
        assert resp.status_code == 422, (bad, resp.status_code)
        assert "paused" in resp.text
    assert not demo.store.is_paused()
    state_events = [r.event for r in demo.store.audit_log(limit=5)]
    assert "resumed" not in state_events[-1:]  # a bad value changed nothing, not even a resume
    for value, paused in (("true", True), ("false", False), ("1", True), ("0", False)):
        ok = client.post("/settings/pause", data={"csrf": csrf, "paused": value}, follow_redirects=False)
        assert ok.status_code == 303
        assert demo.store.is_paused() is paused


def test_a_bad_paused_value_does_not_resume_a_paused_agent(demo: Demo, client: TestClient) -> None:
    csrf = login(client, demo.tokens["operator"])
    client.post("/settings/pause", data={"csrf": csrf, "paused": "true"}, follow_redirects=False)
    assert demo.store.is_paused()
    try:
        resp = client.post("/settings/pause", data={"csrf": csrf, "paused": "maybe"}, follow_redirects=False)
        assert resp.status_code == 422
        assert demo.store.is_paused()
    finally:
        client.post("/settings/pause", data={"csrf": csrf, "paused": "false"}, follow_redirects=False)
    assert not demo.store.is_paused()


def _running_workload(demo: Demo) -> str:
    pending = demo.store.approvals(ApprovalStatus.PENDING)
    return str(pending[0].workload_id if pending else demo.store.actions(limit=1)[0].workload_id)


@pytest.mark.parametrize("body", [{"hours": 1}, {"hours": 1, "reason": ""}, {"hours": 1, "reason": "   "}])
def test_api_snoozes_need_a_reason(demo: Demo, client: TestClient, body: dict[str, object]) -> None:
    wid = _running_workload(demo)
    before = demo.store.snoozes(wid)
    resp = client.post(f"/api/v1/workloads/{wid}/snooze", json=body, headers=bearer(demo.tokens["operator"]))
    assert resp.status_code == 422, resp.text
    assert demo.store.snoozes(wid) == before


def test_a_new_snooze_replaces_the_old_one(demo: Demo, client: TestClient) -> None:
    op = bearer(demo.tokens["operator"])
    wid = _running_workload(demo)
    for hours, why in ((1, "first"), (2, "second")):
        resp = client.post(
            f"/api/v1/workloads/{wid}/snooze", json={"hours": hours, "reason": why}, headers=op
        )
        assert resp.status_code == 200, resp.text
    shown = client.get(f"/api/v1/workloads/{wid}", headers=op).json()
    active = [s for s in shown["snoozes"] if s["ended_at"] is None]
    assert [s["reason"] for s in active] == ["second"]
