"""The command line, driven through Typer's runner against a real SQLite state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app

runner = CliRunner()

SMALL = """\
source:
  name: sim
  sim: {scenario: small, history_hours: 3}
tick_seconds: 60
"""


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    db = tmp_path / "state.db"
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{db}")
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


@pytest.fixture
def config(env: Path) -> Path:
    f = env / "gpusteward.yaml"
    f.write_text(SMALL)
    return f


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_every_command_has_help():
    for cmd in (
        ["demo"],
        ["run"],
        ["scan"],
        ["explain"],
        ["audit"],
        ["pause"],
        ["resume"],
        ["rules", "check"],
    ):
        code, out = invoke(*cmd, "--help")
        assert code == 0, cmd
        assert "Usage" in out, cmd
        assert len(out) > 200, cmd


def test_demo_json_has_the_documented_keys(env):
    code, out = invoke("demo", "--hours", "3", "--json")
    assert code == 0, out
    data = json.loads(out)
    for key in (
        "gpus",
        "hours",
        "findings",
        "actions_by_level",
        "waste_gpu_hours",
        "reclaimed_gpu_hours",
        "cost_saved",
        "false_actions",
        "missed_workloads",
    ):
        assert key in data
    assert data["gpus"] == 64
    assert data["hours"] == 3
    assert data["false_actions"] == 0
    assert data["actions_by_level"].get("L2", 0) > 0


def test_demo_table_ends_with_false_actions_line(env):
    code, out = invoke("demo", "--hours", "2", "--nodes", "2", "--gpus-per-node", "4")
    assert code == 0, out
    assert "false actions: 0" in out
    assert "reclaimed:" in out
    # The light services' consolidation plan, in words, before the closing line.
    plan = next(line for line in out.splitlines() if line.startswith("consolidation plan"))
    assert "GPUs →" in plan
    assert "memory violations" in plan
    assert out.rstrip().splitlines()[-1].startswith("false actions")


def test_scan_is_dry_run_and_finds_waste(config):
    code, out = invoke("scan", "--config", str(config), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["source_ok"] is True
    rules = {f["rule"] for f in data["findings"]}
    assert {"zombie", "idle-allocation"} <= rules
    assert all(f["evidence"] for f in data["findings"])
    # A scan never acts: its decisions are recorded, its actions are dry-run.
    code, out = invoke("audit", "--config", str(config), "--json")
    assert code == 0
    assert all(a["dry_run"] for a in json.loads(out))


def test_run_ticks_then_explain_and_audit(config):
    code, out = invoke("run", "--config", str(config), "--max-ticks", "1")
    assert code == 0, out
    code, out = invoke("audit", "--config", str(config), "--json")
    assert code == 0
    actions = json.loads(out)
    assert actions
    assert all(a["dry_run"] for a in actions)
    workload = actions[0]["workload"]
    code, out = invoke("explain", workload, "--config", str(config), "--json")
    assert code == 0, out
    history = json.loads(out)
    assert history["workload"]["id"] == workload
    assert history["findings"]
    assert history["findings"][0]["evidence"]
    assert history["decisions"]
    code, out = invoke("explain", workload, "--config", str(config))
    assert code == 0
    assert "Evidence" in out


def test_explain_unknown_workload_is_a_clear_error(config):
    code, out = invoke("explain", "no-such-thing", "--config", str(config))
    assert code == 1
    assert "no workload matches" in out


def test_pause_and_resume_flip_the_kill_switch(config):
    from gpusteward.store.db import StateStore

    url = f"sqlite:///{config.parent / 'state.db'}"
    code, out = invoke("pause", "--config", str(config), "--reason", "maintenance")
    assert code == 0
    assert "paused" in out
    assert StateStore(url).is_paused()
    code, out = invoke("scan", "--config", str(config), "--json")
    assert json.loads(out)["paused"] is True
    code, out = invoke("resume", "--config", str(config))
    assert code == 0
    assert not StateStore(url).is_paused()


def test_invalid_config_exits_2_with_file_and_line(env):
    bad = env / "bad.yaml"
    bad.write_text("mode: dry-run\npolicy:\n  ladder:\n    warn_again_after_mintues: 5\n")
    code, out = invoke("scan", "--config", str(bad))
    assert code == 2
    assert f"{bad}:4:" in out
    assert "unknown key" in out


def test_rules_check_accepts_a_good_pack_and_rejects_a_bad_one(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(
        "rules:\n"
        "  - name: hot-idle\n"
        "    kind: idle\n"
        "    when: mean(gpu_util_pct, 20m) < 3 and mean(power_w, 20m) > 200\n"
    )
    code, out = invoke("rules", "check", str(good))
    assert code == 0, out
    assert "1 rule(s) OK" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: evil\n    kind: idle\n    when: __import__('os').system('true')\n")
    code, out = invoke("rules", "check", str(bad))
    assert code == 2
    assert f"{bad}:4" in out


def test_rules_show_lists_the_default_pack(env):
    code, out = invoke("rules", "show")
    assert code == 0
    for name in ("zombie", "idle-allocation", "overprovisioned", "stalled"):
        assert name in out


def test_run_finishes_its_tick_and_exits_on_sigterm(config):
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpusteward", "run", "--config", str(config), "--verbose"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if " tick: " in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert "stopped after 1 tick(s)" in rest
