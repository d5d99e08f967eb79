"""The Alertmanager receiver under hostile input: bodies are cut off as they stream, deep
nesting is a 400, it needs a token unless opened on purpose, and a flood of alerts makes at
most one early tick per interval."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.runtime.config import load_settings
from gpusteward.web.metrics import StewardMetrics
from gpusteward.web.ops import create_app
from gpusteward.web.serve import BackgroundServer
from gpusteward.web.wakeups import CoalescedWake

URL = "/api/v1/alertmanager"
TOKEN = {"authorization": "Bearer s3cret"}


class CountingWake:
    """The loop's wake-up, counting each time the receiver wakes it."""

    def __init__(self) -> None:
        self.sets: list[str] = []

    def set(self, reason: str = "") -> None:
        self.sets.append(reason)


def _alert(name: str) -> bytes:
    alert = {"labels": {"alertname": name, "Hostname": "n1", "gpu": "0"}, "startsAt": "2024-05-01T10:00:00Z"}
    return json.dumps({"version": "4", "status": "firing", "receiver": "r", "alerts": [alert]}).encode()


def _served(wake: CountingWake, **kw: object) -> Iterator[str]:
    app = create_app(StewardMetrics(), wake, **kw)  # type: ignore[arg-type]
    server = BackgroundServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_a_chunked_body_is_cut_off_at_the_limit_not_buffered_whole() -> None:
    """400 chunks of 1 MiB offered; the receiver stops reading right after the 64 KiB limit."""
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(400):
            pulled += 1
            yield b"[" * (1 << 20)

    async def post() -> httpx.Response:
        app = create_app(StewardMetrics(), CountingWake(), token="s3cret", max_body_bytes=64 * 1024)  # type: ignore[arg-type]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
            return await client.post(URL, content=body(), headers=TOKEN)

    resp = asyncio.run(post())
    assert resp.status_code == 413
    assert pulled <= 2


def test_deep_nesting_and_other_bad_json_get_400_never_500() -> None:
    wake = CountingWake()
    for url in _served(wake, token="s3cret"):
        for body in (b"[" * 100_000, b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000, b"\xff\xfe["):
            resp = httpx.post(url + URL, content=body, headers=TOKEN)
            assert resp.status_code == 400, (body[:10], resp.text)
            assert "not JSON" in resp.json()["error"] or "not an Alertmanager" in resp.json()["error"]
        # Nested just under the parser's limit: JSON, but no webhook payload.
        nested = json.dumps(
            {"version": "4", "status": "firing", "receiver": "r", "alerts": [], "x": [[[[[[1]]]]]]}
        )
        assert httpx.post(url + URL, content=nested.encode(), headers=TOKEN).status_code == 202
    assert wake.sets == []


def test_no_token_and_not_opened_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"alertmanager_token.*alertmanager_open"):
        create_app(StewardMetrics(), CountingWake())  # type: ignore[arg-type]
    # Opened on purpose, it takes alerts from anyone; with a token it wants the token.
    for url in _served(CountingWake(), open_to_anyone=True):
        assert httpx.post(url + URL, content=_alert("a")).status_code == 202
    for url in _served(CountingWake(), token="s3cret"):
        assert httpx.post(url + URL, content=_alert("a")).status_code == 401
    settings = load_settings(None, store={"url": f"sqlite:///{tmp_path / 's.db'}"})
    assert settings.server.alertmanager_open is False  # the default is closed


def test_a_flood_of_alerts_wakes_the_loop_once_per_interval() -> None:
    wake = CountingWake()
    for url in _served(wake, token="s3cret", min_wake_interval_s=3600):
        answers = [httpx.post(url + URL, content=_alert(f"a{i}"), headers=TOKEN) for i in range(30)]
        assert all(r.status_code == 202 for r in answers)
        assert [r.json()["ticking_now"] for r in answers] == [True] + [False] * 29
    assert wake.sets == ["alertmanager: alerts a0; gpus n1/gpu0"]


def test_alerts_in_the_interval_come_together_in_one_later_wake_up() -> None:
    now = [0.0]
    due: list[tuple[float, Callable[[], None]]] = []
    wake = CountingWake()
    coalesced = CoalescedWake(wake, 10.0, monotonic=lambda: now[0], later=lambda s, fn: due.append((s, fn)))
    for i in range(1440):  # 1,440 alerts in 10 s
        now[0] = i * 10 / 1440
        coalesced.alert(f"r{i % 3}")
    assert wake.sets == ["r0"]
    assert len(due) == 1  # one wake-up waits for the interval, however many alerts came
    assert due[0][0] == pytest.approx(10.0 - 1 * 10 / 1440)
    now[0] = 10.0
    due[0][1]()
    assert wake.sets == ["r0", "r1; r2; r0"]  # each reason once, in the order they came
    coalesced.alert("r9")  # the next interval began with that wake-up
    assert len(wake.sets) == 2
    assert len(due) == 2
