"""``POST /api/v1/write`` on the web app: auth as the other API endpoints, 204/400/413/415/429/503,
against the app in-process and served by uvicorn (for a chunked body without a length)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import cramjam
import httpx
import pytest
from fastapi.testclient import TestClient

from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS
from gpusteward.integrations.prometheus.remote_write import Receiver, encode
from gpusteward.integrations.prometheus.remote_write import receiver as receiver_module
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.store.access import AccessStore
from gpusteward.store.db import StateStore
from gpusteward.web.app import create_web_app
from gpusteward.web.serve import BackgroundServer

NOW = datetime(2025, 10, 9, 9, 0, tzinfo=UTC)
T0 = int(NOW.timestamp() * 1000)
HEADERS = {
    "content-encoding": "snappy",
    "content-type": "application/x-protobuf",
    "x-prometheus-remote-write-version": "0.1.0",
}
UTIL = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1", "Hostname": "n1", "gpu": "0"}


class Clock:
    def now(self) -> datetime:
        return NOW


def _settings(db: Path) -> Settings:
    return load_settings(
        None,
        store={"url": f"sqlite:///{db}"},
        web={"secret_key": "test-signing-key-0123456789abcdef", "max_body_bytes": 4096},
    )


class Site:
    def __init__(self, tmp: Path, receiver: Receiver | None) -> None:
        settings = _settings(tmp / "state.db")
        store = StateStore(settings.store.url)
        store.create_schema()
        access = AccessStore(store)
        self.tokens = {
            r: access.create_token(f"{r}-1", r, at=NOW)[1] for r in ("viewer", "operator", "admin")
        }
        self.app = create_web_app(store, settings, [], clock=Clock())  # type: ignore[arg-type]
        if receiver is not None:
            self.app.state.web.extra["remote_write"] = receiver
        self.client = TestClient(self.app)

    def post(self, body: bytes, token: str | None = "operator", **headers: str) -> httpx.Response:
        h = {**HEADERS, **headers}
        if token is not None:
            h["authorization"] = f"Bearer {self.tokens.get(token, token)}"
        return self.client.post("/api/v1/write", content=body, headers=h)


@pytest.fixture
def receiver() -> Receiver:
    return Receiver(DEFAULT_SPECS, max_samples=50, max_body_bytes=64 * 1024, clock=lambda: NOW.timestamp())


@pytest.fixture
def site(tmp_path: Path, receiver: Receiver) -> Site:
    return Site(tmp_path, receiver)


def _body(n: int = 1, start: int = T0) -> bytes:
    return encode([(UTIL, [(start + i * 1000, float(i)) for i in range(n)])])


def test_an_operator_writes_samples_past_the_apps_body_limit(site: Site, receiver: Receiver) -> None:
    # 40 series with long labels: over web.max_body_bytes (4 KiB), under the receiver's 64 KiB.
    pad = random.Random(0)
    series = [({**UTIL, "UUID": f"GPU-{i}", "pad": pad.randbytes(200).hex()}, [(T0, 1.0)]) for i in range(40)]
    body = encode(series)
    assert len(body) > 4096
    r = site.post(body)
    assert r.status_code == 204, r.text
    assert receiver.buffered == 40
    assert {s.labels["UUID"] for s in receiver.drain()} == {f"GPU-{i}" for i in range(40)}


def test_the_other_routes_keep_the_apps_body_limit(site: Site) -> None:
    r = site.client.post("/api/v1/pause", content=b"x" * 5000, headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_auth_is_that_of_the_api_and_writing_needs_an_operator(site: Site, receiver: Receiver) -> None:
    assert site.post(_body(), token=None).status_code == 401
    bad = site.post(_body(), token="not-a-token")
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"] == "Bearer"
    assert site.post(_body(), token="viewer").status_code == 403
    assert receiver.buffered == 0
    assert site.post(_body(), token="admin").status_code == 204


def test_malformed_bodies_are_400_and_other_formats_415(site: Site, receiver: Receiver) -> None:
    r = site.post(b"\x00\x01 definitely not snappy \xff" * 10)
    assert r.status_code == 400
    assert "snappy" in r.json()["error"]
    r = site.post(bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\x0f not protobuf")))
    assert r.status_code == 400
    assert "WriteRequest" in r.json()["error"]
    assert site.post(_body(), **{"content-encoding": "gzip"}).status_code == 415
    v2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
    assert site.post(_body(), **{"content-type": v2}).status_code == 415
    assert receiver.buffered == 0
    # Prometheus' receiver takes missing headers as remote write 1.0's: so does this one.
    r = site.client.post(
        "/api/v1/write", content=_body(), headers={"authorization": f"Bearer {site.tokens['operator']}"}
    )
    assert r.status_code == 204


def test_an_oversized_body_is_413_by_its_length_or_by_what_it_expands_to(
    site: Site, receiver: Receiver
) -> None:
    r = site.post(b"\x00" * (64 * 1024 + 1))
    assert r.status_code == 413
    receiver.max_decoded_bytes = 10_000
    assert site.post(bytes(cramjam.snappy.compress_raw(b"\x00" * 20_000))).status_code == 413


def test_a_full_buffer_is_429_with_retry_after_until_the_tick(site: Site, receiver: Receiver) -> None:
    assert site.post(_body(40)).status_code == 204
    r = site.post(_body(20, start=T0 + 100_000))
    assert r.status_code == 429
    assert r.headers["retry-after"] == "5"
    receiver.drain()
    assert site.post(_body(20, start=T0 + 100_000)).status_code == 204


def test_only_post(site: Site) -> None:
    r = site.client.get("/api/v1/write", headers={"authorization": f"Bearer {site.tokens['operator']}"})
    assert r.status_code == 405


def test_without_a_remote_write_source_the_answer_is_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(receiver_module, "_active", None)  # no loop in this process has ticked one
    site = Site(tmp_path, None)
    r = site.post(_body())
    assert r.status_code == 503
    assert "retry-after" in r.headers
    assert site.post(_body(), token=None).status_code == 401  # nothing said to a stranger


@pytest.fixture
def served(site: Site) -> Iterator[str]:
    server = BackgroundServer(site.app, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_a_chunked_body_over_the_limit_is_cut_off_with_413(
    site: Site, served: str, receiver: Receiver
) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield b"\x00" * 4096  # 400 KiB, no Content-Length

    auth = {**HEADERS, "authorization": f"Bearer {site.tokens['operator']}"}
    r = httpx.post(f"{served}/api/v1/write", content=chunks(), headers=auth, timeout=10)
    assert r.status_code == 413
    ok = httpx.post(f"{served}/api/v1/write", content=iter([_body()]), headers=auth, timeout=10)
    assert ok.status_code == 204
    assert receiver.buffered == 1
