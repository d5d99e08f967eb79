"""AWS throttling, which moto cannot do: a loopback HTTP server answers EC2's documented throttling
error (``RequestLimitExceeded``, HTTP 503). botocore's standard mode retries it with backoff; then
the read fails with one line that names throttling, and the instance step plans nothing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.errors import SourceError
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.instances import AwsInstanceControl
from gpusteward.integrations.cloud.settings import AwsSettings
from gpusteward.integrations.sim import SimClock
from gpusteward.policy.instance_settings import InstanceSettings
from gpusteward.runtime.instance_step import InstanceStep
from gpusteward.store.window import WindowStore

THROTTLED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code>'
    b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>1</RequestID></Response>"
)


class Throttling(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).calls += 1
        self.send_response(503)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(THROTTLED)))
        self.end_headers()
        self.wfile.write(THROTTLED)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def throttling(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    Throttling.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Throttling)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_throttling_is_retried_then_named_and_nothing_is_planned(
    throttling: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = AwsClient(AwsSettings(endpoint_url=throttling, max_attempts=3))
    control = AwsInstanceControl(
        client, InstanceSettings(), PriceTable(), SimClock(datetime(2026, 3, 2, tzinfo=UTC))
    )
    with pytest.raises(
        SourceError, match=r"aws ec2 describe_instances failed: throttled by AWS after retries"
    ):
        control.instances()
    # max_attempts counts every call (botocore's total_max_attempts): the first and 2 retries, with
    # backoff between.
    assert Throttling.calls == 3

    step = InstanceStep(InstanceSettings(enabled=True), control)
    now = datetime(2026, 3, 2, tzinfo=UTC)
    window = WindowStore(window_s=3600, interval_s=60)
    with caplog.at_level(logging.WARNING):
        step.observe(now, window.view(now), {}, {})
    assert step.plan(now, paused=False) is None
    assert "instance stops skipped this tick: cannot read the instances" in caplog.text
    assert "RequestLimitExceeded" in caplog.text
