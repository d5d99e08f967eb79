"""/metrics and the Alertmanager receiver, served by uvicorn on 127.0.0.1, and `run --listen` end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gpusteward.integrations.prometheus.localserver import free_port
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.driver import Wake
from gpusteward.web.metrics import StewardMetrics
from gpusteward.web.ops import create_app
from gpusteward.web.serve import BackgroundServer
from gpusteward.web.settings import parse_listen

PAYLOADS = Path(__file__).parents[2] / "fixtures" / "prometheus" / "alertmanager"
VALID = sorted(p.name for p in PAYLOADS.glob("*.json") if p.name != "without_mandatory_field.json")
URL = "/api/v1/alertmanager"


@dataclass
class Served:
    url: str
    metrics: StewardMetrics
    wake: Wake


def _serve(token: str | None = None, max_body: int = 1 << 20) -> Iterator[Served]:
    metrics, wake = StewardMetrics(), Wake()
    # Without a token the receiver is opened explicitly (server.alertmanager_open).
    app = create_app(metrics, wake, token=token, max_body_bytes=max_body, open_to_anyone=token is None)
    server = BackgroundServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield Served(f"http://127.0.0.1:{server.port}", metrics, wake)
    finally:
        server.stop()


@pytest.fixture
def served() -> Iterator[Served]:
    yield from _serve(max_body=64 * 1024)


@pytest.mark.parametrize("name", VALID)
def test_real_payloads_are_accepted(served: Served, name: str) -> None:
    body = (PAYLOADS / name).read_bytes()
    resp = httpx.post(served.url + URL, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 202, resp.text
    doc = json.loads(body)
    assert resp.json()["accepted"] == len(doc["alerts"])
    # only firing alerts wake the loop (an alert without status takes the group's)
    firing = doc["status"] == "firing"
    assert bool(served.wake.take()) is firing
    assert resp.json()["evaluating"] is firing


def test_the_malformed_payload_gets_400_with_the_reasons(served: Served) -> None:
    resp = httpx.post(served.url + URL, content=(PAYLOADS / "without_mandatory_field.json").read_bytes())
    assert resp.status_code == 400
    problems = "\n".join(resp.json()["problems"])
    assert "status: Field required" in problems
    assert "alerts.0.labels" in problems
    assert "alertname" in problems
    assert served.wake.take() == []  # nothing else happens


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "body is not JSON"),
        (b"[]", "not an Alertmanager v4 webhook payload"),
        (json.dumps({"version": "3", "status": "firing", "receiver": "r", "alerts": []}).encode(), "v4"),
        (json.dumps({"version": "4", "status": "burning", "receiver": "r", "alerts": []}).encode(), "v4"),
        (
            json.dumps(
                {
                    "version": "4",
                    "status": "firing",
                    "receiver": "r",
                    "alerts": [{"labels": {"alertname": "x"}}],
                }
            ).encode(),
            "v4",
        ),
        (b"\xff\xfe", "body is not JSON"),
    ],
)
def test_broken_bodies_get_400(served: Served, body: bytes, reason: str) -> None:
    resp = httpx.post(served.url + URL, content=body)
    assert resp.status_code == 400
    assert reason in resp.json()["error"]
    assert served.wake.take() == []


def test_oversized_bodies_get_413(served: Served) -> None:
    resp = httpx.post(served.url + URL, content=b" " * (64 * 1024 + 1))
    assert resp.status_code == 413


def test_alerts_map_to_gpus_and_workloads(served: Served) -> None:
    alert = {
        "status": "firing",
        "labels": {
            "alertname": "GpuStewardZombieGpu",
            "UUID": "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e",
            "Hostname": "node-1",
            "exported_pod": "train-7",
            "exported_namespace": "ml",
            "pod": "nvidia-dcgm-exporter-abc",
        },
        "startsAt": "2024-05-01T10:00:00Z",
    }
    job = {"labels": {"alertname": "GpuStewardIdleGpu", "Hostname": "n2", "gpu": "3", "hpc_job": "42"},
           "startsAt": "2024-05-01T10:00:00Z"}  # fmt: skip
    payload = {"version": "4", "status": "firing", "receiver": "gpusteward", "alerts": [alert, job]}
    resp = httpx.post(served.url + URL, json=payload)
    assert resp.status_code == 202
    doc = resp.json()
    assert doc["gpus"] == ["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "n2/gpu3"]
    assert doc["workloads"] == ["pod/ml/train-7", "job/42"]
    [reason] = served.wake.take()
    assert "pod/ml/train-7" in reason
    assert 'gpusteward_alerts_received_total{status="firing"} 2.0' in httpx.get(served.url + "/metrics").text


def test_bearer_token() -> None:
    for s in _serve(token="s3cret"):
        body = (PAYLOADS / "all_ok.json").read_bytes()
        assert httpx.post(s.url + URL, content=body).status_code == 401
        bad = httpx.post(s.url + URL, content=body, headers={"authorization": "Bearer nope"})
        assert bad.status_code == 401
        ok = httpx.post(s.url + URL, content=body, headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 202


def test_metrics_from_a_tick(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        source={"name": "sim", "sim": {"scenario": "small", "history_hours": 3}},
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
    )
    clock = SimClock(DEFAULT_START)
    steward, _ = build_steward(settings, clock=clock)
    metrics = StewardMetrics()
    for _ in range(90):
        report = steward.tick()
        metrics.record(steward, report, 0.05)
        clock.advance(60)
    text = metrics.render().decode()
    for name in (
        'gpusteward_source_up{source="sim"} 1.0',
        "gpusteward_findings{kind=",
        "gpusteward_idle_gpus ",
        "gpusteward_waste_cost_per_hour ",
        "gpusteward_actions_total{action=",
        "gpusteward_saved_cost_total ",
        'gpusteward_tick_duration_seconds_bucket{le="0.05"} 90.0',
        "gpusteward_paused 0.0",
    ):
        assert name in text, name
    saved = next(line for line in text.splitlines() if line.startswith("gpusteward_saved_cost_total "))
    assert float(saved.split()[1]) > 0  # enforce mode against the simulator stops idle workloads
    idle = {u for f in report.findings if f.action.value == "reclaim" for u in f.gpu_uuids}
    assert f"gpusteward_idle_gpus {float(len(idle))}" in text


def test_parse_listen() -> None:
    assert parse_listen("0.0.0.0:9400") == ("0.0.0.0", 9400)
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:99999", ":9400"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listen(bad)


def test_run_listen_serves_metrics_and_an_alert_wakes_the_loop(tmp_path: Path) -> None:
    """`gpusteward run --listen` as a real process: a one-hour tick interval, yet an alert ticks at once."""
    config = tmp_path / "gpusteward.yaml"
    config.write_text(
        "source: {name: sim, sim: {scenario: small, history_hours: 1}}\n"
        f"tick_seconds: 3600\nstore: {{url: 'sqlite:///{tmp_path / 'state.db'}'}}\n"
        "server: {alertmanager_open: true}\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpusteward",
            "run",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "-v",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        text = _wait_for(
            lambda: httpx.get(base + "/metrics").text, "gpusteward_tick_duration_seconds_count 1.0"
        )
        assert 'gpusteward_source_up{source="sim"} 1.0' in text
        body = (PAYLOADS / "msteams__prom_post_request.json").read_bytes()
        assert httpx.post(base + URL, content=body).status_code == 202
        _wait_for(lambda: httpx.get(base + "/metrics").text, "gpusteward_tick_duration_seconds_count 2.0")
        assert httpx.post(base + URL, content=b"{").status_code == 400
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "tick now: alertmanager: alerts high_memory_load" in err
        assert "stopped after 2 tick(s)" in err
    finally:
        proc.kill()


def _wait_for(get: Callable[[], str], needle: str, hang_guard_s: float = 60) -> str:
    deadline = time.monotonic() + hang_guard_s
    last = ""
    while time.monotonic() < deadline:
        try:
            last = get()
            if needle in last:
                return last
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared; last: {last[-2000:]}")
