"""SIGTERM stops the server even while a request is still running: uvicorn cancels what is left
after the graceful-shutdown timeout instead of waiting for it (issue 22, item 15). Loopback only;
every wait is bounded."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from .conftest import wait_for

#: A server whose one route sleeps far longer than the test waits for the process to exit.
SERVER = """
import sys, time
from pathlib import Path
from fastapi import FastAPI
from gpusteward.web.serve import serve_app

app = FastAPI()
started = Path(sys.argv[2])

@app.get("/slow")
def slow() -> dict[str, str]:
    started.write_text("yes")
    time.sleep(300)  # like a rule preview churning on a hostile pack, in the thread pool
    return {"done": "late"}

serve_app(app, "127.0.0.1", int(sys.argv[1]), grace_s=1)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_sigterm_during_a_slow_request_exits_after_the_grace(tmp_path: Path) -> None:
    port, started = _free_port(), tmp_path / "started"
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(started)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _accepts(port) or proc.poll() is not None, "the server start")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""

        def call() -> None:
            # The server going away mid-request is what this test wants.
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/slow", timeout=60)

        threading.Thread(target=call, daemon=True).start()
        wait_for(started.exists, "the slow request")
        proc.send_signal(signal.SIGTERM)
        # The request would run for 300 s; the grace is 1 s. Without the timeout uvicorn waits.
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("serve kept running after SIGTERM while a request was in flight")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
