"""End to end with the real Prometheus (Debian's 2.42): it scrapes a dcgm-exporter exposition
built from a real scrape (planted GPUs: idle with memory held, busy, free), remote-writes to
gpusteward's web server (uvicorn on loopback, an operator token), and the loop's tick finds
exactly the planted idle, held GPUs."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gpusteward.domain.models import RuleAction
from gpusteward.integrations.prometheus.localserver import binaries, free_port
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS
from gpusteward.integrations.prometheus.remote_write import Receiver
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.store.access import AccessStore
from gpusteward.web.app import create_web_app
from gpusteward.web.live import Attached
from gpusteward.web.serve import BackgroundServer

Scraped = list[tuple[dict[str, str], float]]
T4 = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
# uuid → (holder labels, GPU_UTIL %, FB_USED MiB); expected: the idle ones with a holder.
PLANTED: dict[str, tuple[dict[str, str], float, float]] = {
    "GPU-idle-1": ({"pod": "train-a", "namespace": "ml", "container": "main"}, 0.0, 12_000.0),
    "GPU-idle-2": ({"pod": "notebook-b", "namespace": "ds", "container": "lab"}, 0.0, 3_000.0),
    "GPU-busy": ({"pod": "train-c", "namespace": "ml", "container": "main"}, 97.0, 14_000.0),
    "GPU-free": ({}, 0.0, 0.0),
}
RULES = """\
rules:
  - name: idle-for-a-test
    kind: idle
    description: Held, memory in use and no GPU activity for the last 6 seconds (a test's window;
      remote write arrives a second or two late, hence the lower coverage).
    action: reclaim
    when: max(gpu_util_pct, 6s) < 1 and min(mem_used_mib, 6s) > 1000
    min_coverage: 0.5
    waste_minutes: "1"
    message: "{gpu} idle"
"""


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(dcgm: Scraped) -> bytes:
    """The T4's series that gpusteward reads, once per planted GPU, with its holder and values."""
    lines = []
    for uuid, (holder, util, used) in PLANTED.items():
        for labels, value in dcgm:
            name = labels["__name__"]
            if labels.get("UUID") != T4 or name not in DEFAULT_SPECS:
                continue
            v = {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": used}.get(name, value)
            lbl = {**{k: x for k, x in labels.items() if k != "__name__"}, "UUID": uuid, **holder}
            pairs = ",".join(f'{k}="{_esc(x)}"' for k, x in lbl.items())
            lines.append(f"{name}{{{pairs}}} {v:g}")
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def exporter(dcgm: Scraped) -> Iterator[str]:
    body = exposition(dcgm)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _prometheus(workdir: Path, target: str, write_url: str, token: str) -> subprocess.Popen[bytes]:
    found = binaries()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus not installed (apt-get install prometheus)")
        pytest.skip("prometheus not installed (apt-get install prometheus)")
    config = workdir / "prometheus.yml"
    config.write_text(
        f"""\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: dcgm
    honor_labels: true
    static_configs: [{{targets: ["{target}"]}}]
remote_write:
  - url: {write_url}
    authorization: {{credentials: "{token}"}}
    queue_config: {{batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}}
"""
    )
    log = (workdir / "prometheus.log").open("wb")
    return subprocess.Popen(
        [
            found[0],
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{free_port()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_real_prometheus_remote_writes_and_the_tick_finds_exactly_the_idle_gpus(
    tmp_path: Path, exporter: str
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = load_settings(
        None,
        tick_seconds=1,
        source={"name": "remote_write"},
        store={"url": f"sqlite:///{tmp_path / 'state.db'}", "window_minutes": 5},
        rules={"use_default_pack": False, "files": [str(rules)]},
        web={"secret_key": "test-signing-key-0123456789abcdef"},
    )
    steward, integration = build_steward(settings)
    receiver = integration.parts
    assert isinstance(receiver, Receiver)
    steward.tick()  # the source's first tick makes its receiver the web server's
    token = AccessStore(steward.store).create_token("prometheus", "operator", at=datetime.now(UTC))[1]
    web = BackgroundServer(
        create_web_app(steward.store, settings, steward.rules, live=Attached(steward)), "127.0.0.1", 0
    )
    web.start()
    prom = _prometheus(tmp_path, exporter, f"http://127.0.0.1:{web.port}/api/v1/write", token)
    found: tuple[set[str], set[str]] = (set(), set())
    want = ({"pod/ml/train-a", "pod/ds/notebook-b"}, {"GPU-idle-1", "GPU-idle-2"})
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and found != want:
            time.sleep(1)
            report = steward.tick()
            assert report.source_ok, report.errors
            reclaim = [f for f in report.findings if f.action is RuleAction.RECLAIM]
            found = (
                {f.workload_id for f in reclaim if f.workload_id},
                {u for f in reclaim for u in f.gpu_uuids},
            )
        assert found == want, (tmp_path / "prometheus.log").read_text()[-3000:]
        # Every planted GPU arrived, with its holder; the free one is known and held by nobody.
        assert set(PLANTED) <= set(steward.gpus)
        assert set(steward.workloads) == {"pod/ml/train-a", "pod/ds/notebook-b", "pod/ml/train-c"}
        assert receiver.stats.accepted > 0
        assert receiver.stats.out_of_order == 0
        # A wrong token is refused, as for any API caller.
        bad = httpx.post(
            f"http://127.0.0.1:{web.port}/api/v1/write", content=b"", headers={"authorization": "Bearer x"}
        )
        assert bad.status_code == 401
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
        web.stop()
        steward.source.close()
