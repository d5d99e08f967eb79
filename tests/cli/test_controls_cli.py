"""``approvals``, ``snooze``/``unsnooze``, ``db`` and ``audit verify|export`` on a real SQLite file."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.models import ApprovalStatus, Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import audit_t

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", url)
    monkeypatch.setenv("COLUMNS", "200")
    s = StateStore(url)
    s.create_schema()
    now = datetime.now(tz=UTC)
    job = Workload(
        "job-1", WorkloadKind.JOB, "train", Owner("alice", "nlp"), 1, ("G0",), now - timedelta(hours=5)
    )
    s.remember_workloads([job], now)
    return s


def request(store: StateStore) -> int:
    d = Decision(
        "job-1", datetime.now(tz=UTC), Level.FORCE, "force", "idle 3 h", idempotency_key="job-1:1:1:force"
    )
    return store.request_approval(d, dry_run=False, at=datetime.now(tz=UTC), ttl=timedelta(hours=2)).id


def test_approvals_list_approve_and_reject(store: StateStore) -> None:
    first = request(store)
    code, out = invoke("approvals", "list", "--json")
    assert code == 0, out
    assert [r["id"] for r in json.loads(out)] == [first]
    code, out = invoke("approvals", "list")
    assert "job-1" in out
    code, out = invoke("approvals", "approve", str(first), "--by", "carol", "--reason", "ok")
    assert code == 0, out
    assert "approved" in out
    record = store.approval(first)
    assert record is not None
    assert (record.status, record.decided_by) == (ApprovalStatus.APPROVED, "carol")
    # Deciding twice is a clear error, exit code 1.
    code, out = invoke("approvals", "reject", str(first), "--reason", "late")
    assert code == 1
    assert "is approved, not pending" in out
    code, out = invoke("approvals", "reject", "4242", "--reason", "x")
    assert (code, "no approval request 4242" in out) == (1, True)
    code, out = invoke("approvals", "list", "--status", "bogus")
    assert code == 2


def test_snooze_and_unsnooze(store: StateStore) -> None:
    code, out = invoke("snooze", "job-1", "--hours", "2", "--reason", "demo", "--by", "alice", "--json")
    assert code == 0, out
    assert json.loads(out)["by"] == "alice"
    assert list(store.active_snoozes(datetime.now(tz=UTC))) == ["job-1"]
    code, out = invoke("snooze", "job-1", "--hours", "48", "--reason", "long")
    assert code == 1
    assert "at most 24 h" in out
    code, out = invoke("snooze", "nope", "--hours", "1", "--reason", "x")
    assert code == 1
    assert "no workload 'nope'" in out
    code, out = invoke("unsnooze", "job-1")
    assert code == 0, out
    assert store.active_snoozes(datetime.now(tz=UTC)) == {}
    code, out = invoke("unsnooze", "job-1")
    assert code == 1


def test_db_upgrade_and_current(store: StateStore) -> None:
    code, out = invoke("db", "current", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["current"] == data["head"]
    code, out = invoke("db", "upgrade")
    assert code == 0, out
    assert "already at" in out


def test_audit_verify_export_and_list(store: StateStore, tmp_path: Path) -> None:
    request(store)
    store.set_paused(True, by="ops", reason="maintenance", at=datetime.now(tz=UTC))
    code, out = invoke("audit", "verify", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["ok"] is True
    assert report["records"] == 2
    jsonl = tmp_path / "audit.jsonl"
    code, out = invoke("audit", "export", "--format", "jsonl", "--output", str(jsonl))
    assert code == 0, out
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["event"] for r in lines] == ["approval.requested", "paused"]
    assert lines[-1]["hash"] == report["head_hash"]
    code, out = invoke("audit", "export", "--format", "csv")
    rows = list(csv.DictReader(out.splitlines()))
    assert [r["seq"] for r in rows] == ["1", "2"]
    assert json.loads(rows[1]["payload"])["reason"] == "maintenance"
    # `audit` alone, and `audit list`, still list actions.
    assert invoke("audit", "--json") == (0, "[]\n")
    assert invoke("audit", "list", "--json")[0] == 0

    with store.transaction("tamper") as conn:
        conn.execute(update(audit_t).where(audit_t.c.seq == 1).values(event="approval.approved"))
    code, out = invoke("audit", "verify")
    assert code == 1
    assert "seq 1" in out
    assert "changed" in out
    code, out = invoke("audit", "verify", "--json")
    assert code == 1
    assert json.loads(out)["ok"] is False
