"""Approve, reject and snooze through the API and the pages: runtime.controls decides, the web
shows its refusals as 404/409 with the message, and every decision is audited by name."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from fastapi.testclient import TestClient

from gpusteward.domain.models import ApprovalStatus

from .conftest import Demo, bearer, login


def test_operator_approves_once_and_a_second_decision_is_409(demo: Demo, client: TestClient) -> None:
    op = bearer(demo.tokens["operator"])
    pending = demo.store.approvals(ApprovalStatus.PENDING)[0]
    ok = client.post(f"/api/v1/approvals/{pending.id}/approve", json={"reason": "idle"}, headers=op)
    assert ok.status_code == 200, ok.text
    assert ok.json()["status"] == "approved"
    assert ok.json()["decided_by"] == "operator-1"
    again = client.post(f"/api/v1/approvals/{pending.id}/reject", json={"reason": "no"}, headers=op)
    assert again.status_code == 409
    assert "not pending" in again.json()["error"]
    assert client.post("/api/v1/approvals/999999/approve", json={}, headers=op).status_code == 404
    events = [r.event for r in demo.store.audit_log(limit=20, workload_id=pending.workload_id)]
    assert "approval.approved" in events


def test_snooze_has_limits_and_needs_a_known_workload(demo: Demo, client: TestClient) -> None:
    op = bearer(demo.tokens["operator"])
    wid = demo.store.actions(limit=1)[0].workload_id
    too_long = client.post(f"/api/v1/workloads/{wid}/snooze", json={"hours": 1000, "reason": "x"}, headers=op)
    assert too_long.status_code == 409
    assert "at most" in too_long.json()["error"]
    unknown = client.post("/api/v1/workloads/job-nobody/snooze", json={"hours": 1, "reason": "x"}, headers=op)
    assert unknown.status_code == 404
    ok = client.post(f"/api/v1/workloads/{wid}/snooze", json={"hours": 2, "reason": "debugging"}, headers=op)
    assert ok.status_code == 200, ok.text
    assert wid in demo.store.active_snoozes(demo.clock.now())


def test_pages_approve_and_reject_with_a_reason(demo: Demo, client: TestClient) -> None:
    csrf = login(client, demo.tokens["operator"])
    # A second request to decide on (the demo made one; the previous test used it).
    held = [
        d for d in demo.store.decisions_for(demo.store.actions(limit=1)[0].workload_id) if d.idempotency_key
    ]
    fresh = demo.store.request_approval(
        replace(held[-1], idempotency_key="web-test:reject"),
        dry_run=False,
        at=demo.clock.now(),
        ttl=timedelta(hours=1),
    )
    page = client.get("/approvals")
    assert f'id="approval-{fresh.id}"' in page.text
    no_reason = client.post(f"/approvals/{fresh.id}", data={"csrf": csrf, "decision": "reject", "reason": ""})
    assert no_reason.status_code == 409
    assert "needs a reason" in no_reason.text
    done = client.post(
        f"/approvals/{fresh.id}",
        data={"csrf": csrf, "decision": "reject", "reason": "still needed"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    rec = demo.store.approval(fresh.id)
    assert rec is not None
    assert rec.status is ApprovalStatus.REJECTED
    assert rec.decision_reason == "still needed"
