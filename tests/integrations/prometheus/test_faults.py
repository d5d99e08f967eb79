"""Prometheus down, slow, answering 5xx, garbage or partial data: the tick goes on, stale GPUs are
never acted on, health shows in the report and in /metrics, and the source recovers with backoff.

A small fault-injecting proxy (a real HTTP server on 127.0.0.1) sits in front of the real
Prometheus; each test sets what it does to the next requests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import RuleAction, utc
from gpusteward.integrations.prometheus.client import ClientOptions, PrometheusClient
from gpusteward.integrations.prometheus.localserver import LocalPrometheus
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.tick_report import TickReport
from gpusteward.web.metrics import StewardMetrics


class FaultProxy:
    """Forwards to ``upstream`` unless told to fail: mode pass | 503 | slow | garbage | drop:<uuid>."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mode = "pass"
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_POST(self) -> None:
                proxy.requests += 1
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                mode = proxy.mode
                if mode == "503":
                    return self._send(503, b"upstream unavailable", "text/plain")
                if mode == "garbage":
                    return self._send(200, b"<html>login</html>", "text/html")
                if mode == "slow":
                    time.sleep(1.5)
                resp = httpx.post(
                    proxy.upstream + self.path,
                    content=body,
                    headers={"content-type": self.headers["content-type"]},
                    timeout=30,
                )
                out = resp.content
                if mode.startswith("drop:"):
                    doc = json.loads(out)
                    uuid = mode.split(":", 1)[1]
                    res = doc["data"]["result"]
                    doc["data"]["result"] = [r for r in res if uuid not in r["metric"].values()]
                    doc["warnings"] = ["partial response: one store did not answer"]
                    out = json.dumps(doc).encode()
                return self._send(resp.status_code, out, "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(cluster_prom: LocalPrometheus) -> Iterator[FaultProxy]:
    p = FaultProxy(cluster_prom.url)
    yield p
    p.close()


def _reclaim(report: TickReport) -> set[str]:
    return {f.workload_id for f in report.findings if f.action is RuleAction.RECLAIM and f.workload_id}


def _start(settings: Settings, at: float) -> tuple[Steward, SimClock]:
    clock = SimClock(utc(at))
    steward, _ = build_steward(settings, clock=clock)
    return steward, clock


def test_down_5xx_and_recovery_with_backoff(
    proxy: FaultProxy,
    prom_settings: Callable[..., Settings],
    end_s: float,
    expected: tuple[set[str], set[str]],
) -> None:
    steward, clock = _start(prom_settings(proxy.url), end_s - 600)
    metrics = StewardMetrics()
    # ten minutes before the data ends, the "stale" GPU's exporter has only just stopped and
    # the handed-over GPU is still with its old pod
    assert _reclaim(steward.tick()) == expected[0] | {"pod/ml/stale-l", "pod/ml/old-n"}
    proxy.mode = "503"
    clock.advance(30)
    report = steward.tick()
    metrics.record(steward, report, 0.1)
    assert not report.source_ok
    assert any("503" in e for e in report.errors)
    assert 'gpusteward_source_up{source="prometheus"} 0.0' in metrics.render().decode()
    # the tick goes on; once the window has nothing fresh, nothing is judged
    clock.advance(240)
    asked = proxy.requests
    report = steward.tick()
    assert _reclaim(report) == set()
    assert report.stale_gpus > 0
    # backing off: the next tick does not even ask
    proxy.mode = "pass"
    clock.advance(1)
    asked = proxy.requests
    report = steward.tick()
    assert proxy.requests == asked
    assert not report.source_ok
    assert "backing off" in report.errors[0]
    # after the backoff it asks again, recovers, and judges again from fresh data
    clock.advance(300)
    report = steward.tick()
    metrics.record(steward, report, 0.1)
    assert report.source_ok
    assert 'gpusteward_source_up{source="prometheus"} 1.0' in metrics.render().decode()
    assert _reclaim(report) == expected[0] - {"pod/ml/stale-l"}


def test_partial_data_leaves_the_missing_gpus_stale(
    proxy: FaultProxy,
    prom_settings: Callable[..., Settings],
    end_s: float,
    expected: tuple[set[str], set[str]],
) -> None:
    steward, clock = _start(prom_settings(proxy.url), end_s - 600)
    proxy.mode = "drop:GPU-a1"
    for _ in range(10):  # five minutes without GPU-a1's data
        clock.advance(30)
        report = steward.tick()
    assert report.source_ok
    assert any("partial response" in e for e in report.errors)
    assert _reclaim(report) == expected[0] - {"pod/ml/stale-l", "pod/ml/notebook-a"}
    assert report.stale_gpus >= 2  # GPU-a1 and the planted stale GPU


def test_slow_garbage_and_unreachable_are_source_errors(proxy: FaultProxy, end_s: float) -> None:
    client = PrometheusClient(ClientOptions(proxy.url, timeout_s=0.3))
    proxy.mode = "slow"
    with pytest.raises(SourceError, match=r"timed out after 0\.3 s"):
        client.query("up", utc(end_s))
    proxy.mode = "garbage"
    with pytest.raises(SourceError, match="no JSON"):
        client.query("up", utc(end_s))
    proxy.mode = "pass"
    with pytest.raises(SourceError, match="bad_data"):
        client.query("sum(", utc(end_s))
    proxy.close()
    with pytest.raises(SourceError, match="unreachable"):
        client.query("up", utc(end_s))


def test_a_slow_server_does_not_stop_the_tick(
    proxy: FaultProxy, prom_settings: Callable[..., Settings], end_s: float
) -> None:
    steward, clock = _start(prom_settings(proxy.url, timeout_seconds=0.3), end_s - 600)
    proxy.mode = "slow"
    clock.advance(30)
    report = steward.tick()
    assert not report.source_ok
    assert "timed out" in report.errors[0]
    assert report.gpus > 0  # the window from start-up is still there
