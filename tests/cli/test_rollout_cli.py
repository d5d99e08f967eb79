"""``gpusteward rollout``: promotion refused without the criteria, accepted with them, audited
either way; suspected false kills listed, confirmed and dismissed; on a real SQLite file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.policy.rollout import FalseKill, Watch, to_json
from gpusteward.runtime.rollout import WATCH_KEY
from gpusteward.store.db import StateStore

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _config(tmp_path: Path, min_days: float) -> str:
    f = tmp_path / "c.yaml"
    f.write_text(
        f"store:\n  url: sqlite:///{tmp_path / 'state.db'}\n"
        "policy:\n  scopes:\n    - name: pilot-nlp\n      match: {teams: [nlp]}\n      mode: observe\n"
        f"  rollout:\n    promote_when: {{min_days: {min_days}, max_false_kills: 0, max_appeals: 2}}\n"
    )
    return str(f)


def _events(tmp_path: Path) -> list[tuple[str, dict[str, object]]]:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    return [(r.event, dict(r.payload)) for r in store.audit_log(limit=100) if r.event.startswith("rollout.")]


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def test_promote_is_refused_without_the_criteria_and_audited(tmp_path: Path) -> None:
    cfg = _config(tmp_path, min_days=14)
    code, out = invoke("rollout", "promote", "pilot-nlp", "-c", cfg, "--by", "ops")
    assert code == 1
    assert "does not meet the promotion criteria" in out
    code, out = invoke("rollout", "status", "-c", cfg, "--json")
    assert code == 0
    rows = {r["scope"]: r for r in json.loads(out)}
    assert rows["pilot-nlp"]["stage"] == "observe"
    assert not rows["pilot-nlp"]["ready_to_promote"]
    assert rows["default"]["stage"] == "enforce"
    # --force without a reason is a usage error; with one it promotes, audited as forced.
    assert invoke("rollout", "promote", "pilot-nlp", "-c", cfg, "--force")[0] == 2
    code, out = invoke(
        "rollout", "promote", "pilot-nlp", "-c", cfg, "--force", "--reason", "exec ask", "--by", "ops"
    )
    assert code == 0, out
    assert "now in notify" in out
    events = _events(tmp_path)
    assert [e for e, _ in events] == ["rollout.promote_refused", "rollout.promoted"]
    assert events[1][1]["forced"] is True
    assert events[1][1]["to"] == "notify"


def test_promote_is_accepted_with_the_criteria(tmp_path: Path) -> None:
    cfg = _config(tmp_path, min_days=0)
    code, out = invoke("rollout", "promote", "pilot-nlp", "-c", cfg, "--json")
    assert code == 0, out
    assert json.loads(out)["stage"] == "notify"
    assert invoke("rollout", "promote", "pilot-nlp", "-c", cfg)[0] == 0
    code, out = invoke("rollout", "promote", "pilot-nlp", "-c", cfg)
    assert code == 1
    assert "already at enforce" in out
    assert [e for e, _ in _events(tmp_path)] == [
        "rollout.promoted",
        "rollout.promoted",
        "rollout.promote_refused",
    ]


def test_false_kills_block_promotion_until_dismissed(tmp_path: Path) -> None:
    cfg = _config(tmp_path, min_days=0)
    invoke("rollout", "status", "-c", cfg)  # creates the schema
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    now = datetime.now(tz=UTC)
    fk = FalseKill(
        1, "job-1", now - timedelta(hours=1), now, "pilot-nlp", "idle-allocation", "batch", "resubmitted"
    )
    store.save_doc(WATCH_KEY, to_json(Watch(false_kills=[fk], next_id=2)), at=now)
    code, out = invoke("rollout", "false-kills", "-c", cfg, "--json")
    assert code == 0
    assert json.loads(out)["false_kills"][0]["status"] == "suspected"
    code, out = invoke("rollout", "promote", "pilot-nlp", "-c", cfg)
    assert code == 1
    assert "1 suspected false kills" in out
    code, out = invoke("rollout", "status", "-c", cfg, "--json")
    assert {r["scope"]: r["slowdown"] for r in json.loads(out)}["pilot-nlp"] == 2.0
    assert invoke("rollout", "false-kills", "dismiss", "1", "-c", cfg, "--reason", "was a re-run")[0] == 0
    assert invoke("rollout", "false-kills", "confirm", "1", "-c", cfg)[0] == 1  # settled already
    assert invoke("rollout", "promote", "pilot-nlp", "-c", cfg)[0] == 0
