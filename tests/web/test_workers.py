"""`gpusteward serve --workers N` as a real process tree: N worker processes answer on one port,
each with its share of the failed-login throttle, and SIGTERM stops them all. Loopback only;
every wait is bounded."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.integrations.prometheus.localserver import free_port
from gpusteward.runtime.config import load_settings
from gpusteward.store.db import StateStore
from gpusteward.web.app import create_web_app

from .conftest import wait_for


def _config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "gpusteward.yaml"
    config.write_text(
        "source: {name: sim, sim: {scenario: small, history_hours: 1}}\n"
        f"store: {{url: 'sqlite:///{tmp_path / 'state.db'}'}}\n"
        f"web: {{login_max_failures: 4{extra}}}\n"
    )
    return config


def _workers(pid: int) -> list[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _answers(base: str, token: str) -> bool:
    try:
        return httpx.get(f"{base}/api/v1/me", headers={"authorization": f"Bearer {token}"}).status_code == 200
    except httpx.TransportError:
        return False


def test_serve_with_two_workers_answers_from_both_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = _config(tmp_path)
    made = CliRunner().invoke(app, ["token", "create", "--name", "ci", "-c", str(config), "--json"])
    assert made.exit_code == 0, made.output
    token = json.loads(made.stdout)["token"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpusteward", "serve", "-c", str(config), "--port", str(port), "-w", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: proc.poll() is not None or _answers(base, token), "the first answer", limit_s=60)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        wait_for(lambda: len(_workers(proc.pid)) == 2, "two workers", limit_s=60)
        workers = _workers(proc.pid)
        before = {w: _cpu_ticks(w) for w in workers}
        # New connections, so the kernel hands them to whichever worker accepts first.
        for _ in range(60):
            page = httpx.get(f"{base}/findings", headers={"authorization": f"Bearer {token}"})
            assert page.status_code == 200
        busy = [w for w in workers if _cpu_ticks(w) > before[w]]
        assert busy == workers, "both workers answered pages"

        # Each worker allows ceil(4 / 2) failed logins: the server as a whole about 4, not 8.
        codes = [
            httpx.get(f"{base}/api/v1/me", headers={"authorization": "Bearer gst_wrong-token"}).status_code
            for _ in range(9)
        ]
        assert codes[0] == 401
        assert set(codes) == {401, 429}
        assert codes.count(401) <= 4, codes  # two a worker, whichever worker each try reached

        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: proc.poll() is not None, "the exit after SIGTERM", limit_s=30)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        for w in workers:
            assert not Path(f"/proc/{w}").exists() or "Z" in Path(f"/proc/{w}/stat").read_text().split()[2]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_each_process_allows_its_share_of_failed_logins(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path))
    store = StateStore(settings.store.url)
    store.create_schema()
    for processes, share in ((1, 4), (2, 2), (3, 2), (8, 1)):
        web = create_web_app(store, settings, [], processes=processes)
        assert web.state.web.auth.guard.window.max_failures == share == math.ceil(4 / processes)


def test_workers_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    config = _config(tmp_path)
    result = CliRunner().invoke(app, ["serve", "-c", str(config), "--workers", "0"])
    assert result.exit_code == 2
    assert "--workers" in result.output
    bad = _config(tmp_path, ", workers: 0")
    result = CliRunner().invoke(app, ["serve", "-c", str(bad)])
    assert result.exit_code == 2
    assert "workers" in result.output
    assert str(bad) in result.output


def test_a_bad_rule_pack_stops_serve_before_any_worker_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gpusteward.cli.web.serve_workers", lambda *a, **k: pytest.fail("workers started"))
    pack = tmp_path / "rules.yaml"
    pack.write_text("rules:\n  - name: broken\n    kind: idle\n    when: gpu_util <\n")
    config = _config(tmp_path, ", workers: 2")
    config.write_text(config.read_text() + f"rules: {{files: ['{pack}']}}\n")
    result = CliRunner().invoke(app, ["serve", "-c", str(config)])
    assert result.exit_code == 2, result.output
    assert "rules.yaml" in result.output
