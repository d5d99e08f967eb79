"""`gpusteward token create|list|revoke`, and `gpusteward run --web` as a real process: the web
admin, its API, /metrics and the receiver on one port beside the loop; SIGTERM stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import httpx
from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.integrations.prometheus.localserver import free_port
from gpusteward.store.db import StateStore


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "gpusteward.yaml"
    config.write_text(
        "source: {name: sim, sim: {scenario: small, history_hours: 1}}\n"
        f"tick_seconds: 3600\nstore: {{url: 'sqlite:///{tmp_path / 'state.db'}'}}\n"
        "server: {alertmanager_token: am-s3cret}\n"  # run --web mounts the receiver: never anonymous
    )
    return config


def test_token_create_list_revoke(tmp_path: Path) -> None:
    config = str(_config(tmp_path))
    runner = CliRunner()
    made = runner.invoke(
        app, ["token", "create", "--role", "operator", "--name", "ci", "-c", config, "--json"]
    )
    assert made.exit_code == 0, made.output
    token = json.loads(made.stdout)["token"]
    assert token.startswith("gst_")
    again = runner.invoke(app, ["token", "create", "--role", "operator", "--name", "ci", "-c", config])
    assert again.exit_code == 1
    assert "exists already" in again.output
    bad = runner.invoke(app, ["token", "create", "--role", "root", "--name", "x", "-c", config])
    assert bad.exit_code == 2
    assert "--role must be one of" in bad.output
    listed = json.loads(runner.invoke(app, ["token", "list", "-c", config, "--json"]).stdout)
    assert [(t["name"], t["role"], t["revoked_at"]) for t in listed] == [("ci", "operator", None)]
    assert token not in runner.invoke(app, ["token", "list", "-c", config]).output
    assert runner.invoke(app, ["token", "revoke", "ci", "-c", config]).exit_code == 0
    assert json.loads(runner.invoke(app, ["token", "list", "-c", config, "--json"]).stdout)[0]["revoked_at"]
    assert runner.invoke(app, ["token", "revoke", "ci", "-c", config]).exit_code == 1


def _wait(url: str, hang_guard_s: float = 60) -> httpx.Response:
    deadline = time.monotonic() + hang_guard_s  # a guard against a hung process, not a timing test
    while True:
        try:
            return httpx.get(url)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _wait_text(url: str, needle: str, hang_guard_s: float = 60) -> str:
    deadline = time.monotonic() + hang_guard_s
    while needle not in (text := httpx.get(url).text):
        assert time.monotonic() < deadline, f"{needle!r} never appeared at {url}"
        time.sleep(0.2)
    return text


def test_run_web_serves_pages_api_and_metrics_beside_the_loop(tmp_path: Path) -> None:
    config = _config(tmp_path)
    made = CliRunner().invoke(
        app, ["token", "create", "--role", "operator", "--name", "op", "-c", str(config), "--json"]
    )
    token = json.loads(made.stdout)["token"]
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpusteward",
            "run",
            "--config",
            str(config),
            "--web",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert _wait(base + "/healthz").json() == {"ok": True}
        metrics = _wait_text(base + "/metrics", "gpusteward_tick_duration_seconds_count 1.0")
        names = ["gpusteward_paused", "gpusteward_idle_gpus", "gpusteward_waste_cost_per_hour"]
        names += ["gpusteward_tick_duration_seconds_bucket", 'gpusteward_source_up{source="sim"}']
        for name in names:
            assert name in metrics, name
        assert httpx.get(base + "/api/v1/findings").status_code == 401
        auth = {"authorization": f"Bearer {token}"}
        assert httpx.get(base + "/api/v1/me", headers=auth).json()["role"] == "operator"
        # live data: the loop's own window feeds the utilisation chart
        util = httpx.get(base + "/api/v1/overview", headers=auth).json()["utilisation"]
        assert any(u["pct"] is not None for u in util)
        assert httpx.post(base + "/api/v1/pause", json={"reason": "ci"}, headers=auth).json() == {
            "paused": True
        }
        assert httpx.get(base + "/", follow_redirects=False).status_code == 303
        assert httpx.get(base + "/static/htmx.min.js").status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


def test_sigterm_writes_the_ledgers_waiting_amounts(tmp_path: Path) -> None:
    """The ledger is written every 5 minutes; a `gpusteward run` stopped by SIGTERM after a few
    1-second ticks writes what waited (the first tick, the only one written before, has no use)."""
    db = tmp_path / "state.db"
    config = tmp_path / "gpusteward.yaml"
    config.write_text(
        "source: {name: sim, sim: {scenario: small, history_hours: 0}}\n"
        f"tick_seconds: 1\nstore: {{url: 'sqlite:///{db}'}}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpusteward", "run", "--config", str(config), "--verbose"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    assert proc.stderr is not None
    threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True).start()
    try:
        deadline = time.monotonic() + 120  # a guard against a hung process, not a timing test
        while sum("tick: " in line for line in list(lines)) < 4:
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "gpusteward run never ticked four times"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    store = StateStore(f"sqlite:///{db}")
    try:
        rows = store.ledger.usage(date(2000, 1, 1), date(2100, 1, 1))
    finally:
        store.close()
    assert sum(r.amounts.held_gpu_hours for r in rows) > 0
