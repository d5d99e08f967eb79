"""Real receivers on loopback: an SMTP server (aiosmtpd) and an HTTP server standing in for the
Slack, DingTalk and WeCom webhook endpoints (apprise's own plugins post to it)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    sink: list[Received]

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        self.sink.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        # Each service's success answer: Slack's webhook says "ok"; DingTalk and WeCom errcode 0.
        reply = b"ok" if self.path.startswith("/slack") else b'{"errcode": 0, "errmsg": "ok"}'
        self.send_response(200)
        self.send_header("content-type", "text/plain" if reply == b"ok" else "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    sink: list[Received] = []
    handler = type("Handler", (_Handler,), {"sink": sink})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}", sink)
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Mailbox:
    port: int
    messages: list[Any] = field(default_factory=list)


@pytest.fixture
def smtp() -> Iterator[Mailbox]:
    """A real SMTP server (aiosmtpd) on a free loopback port; messages land in ``messages``."""
    from aiosmtpd.controller import Controller

    box = Mailbox(free_port())

    class Handler:
        async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
            box.messages.append(envelope)
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
