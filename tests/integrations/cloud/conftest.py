"""moto's server mode on loopback: a real HTTP server speaking the AWS APIs, that boto3 reaches
through ``endpoint_url`` like any AWS endpoint (no in-process patching). One server per test
session; each test starts from an empty account (``/moto-api/reset``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("moto", reason="moto[server] comes with the dev extra")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/moto-api/", timeout=1.0).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError("moto server exited at start-up")
            time.sleep(0.1)
        else:
            raise RuntimeError("moto server did not answer within 30 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty moto account for this test; boto3 reads these credentials from the environment."""
    httpx.post(f"{moto_endpoint}/moto-api/reset", timeout=10.0).raise_for_status()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return moto_endpoint
