"""``POST /api/v1/write``: Prometheus remote write (1.0) into the ``remote_write`` source.

A pure ASGI middleware in front of the app: the app's ``BodyLimit`` (``web.max_body_bytes``,
1 MiB, sized for forms and JSON) would refuse a sender's batch, so this path is answered here
under the receiver's own limits, and never reaches a route. Senders authenticate like any API
caller, with an operator (or admin) bearer token: written samples drive decisions. Answers:

* 204: taken (samples out of order or duplicated are dropped or ignored, see ``receiver``);
* 400: not snappy, not a ``WriteRequest``; 413: the body, or what it decompresses to, is over
  the limit (``Content-Length`` is checked before reading and the read is capped);
* 415: another encoding or message (remote write 2.0); 429 with ``Retry-After``: the buffer
  is full until the next tick, the sender retries; 401/403 as the other endpoints;
* 503 with ``Retry-After``: no ``remote_write`` source ticks in this process (``gpusteward
  serve``, or before the loop's first tick).
"""

from __future__ import annotations

import json
from typing import Any

from anyio import to_thread
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gpusteward.integrations.prometheus.remote_write import BadBody, BufferFull, Receiver, TooLarge, active
from gpusteward.store.access import Role
from gpusteward.web.auth import AuthError
from gpusteward.web.context import WebContext

PATH = "/api/v1/write"


class _Answer(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class RemoteWrite:
    """Answers ``POST /api/v1/write``; passes everything else to ``app``."""

    def __init__(self, app: ASGIApp, ctx: WebContext) -> None:
        self.app = app
        self.ctx = ctx

    def receiver(self) -> Receiver | None:
        """The one given in ``ctx.extra`` (tests), else the one this process's loop drains."""
        given = self.ctx.extra.get("remote_write")
        return given if isinstance(given, Receiver) else active()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        try:
            if scope["method"] != "POST":
                raise _Answer(405, "remote write is POST", {"allow": "POST"})
            request = Request(scope)
            await to_thread.run_sync(self._authorize, request)  # the token check reads the database
            receiver = self.receiver()
            if receiver is None:
                raise _Answer(503, "no remote_write source ticks in this process", {"retry-after": "30"})
            _check_headers(request)
            body = await _read(receive, scope, receiver.max_body_bytes)
            await to_thread.run_sync(_take, receiver, body)
        except _Answer as a:
            await _send(send, a.status, {"error": a.message}, a.headers)
            return
        await _send(send, 204, None, {})

    def _authorize(self, request: Request) -> None:
        try:
            self.ctx.auth.require(request, self.ctx.now(), Role.OPERATOR)
        except AuthError as e:
            headers = {"www-authenticate": "Bearer"} if e.status == 401 else {}
            if e.retry_after is not None:
                headers["retry-after"] = str(e.retry_after)
            raise _Answer(e.status, e.message, headers) from e


def _check_headers(request: Request) -> None:
    """Prometheus' own receiver takes a missing Content-Type or Content-Encoding as 1.0's."""
    encoding = request.headers.get("content-encoding", "snappy").strip().lower()
    if encoding != "snappy":
        raise _Answer(415, f"content-encoding {encoding!r}: only snappy is accepted")
    ctype = request.headers.get("content-type", "application/x-protobuf")
    media, *params = (p.strip() for p in ctype.split(";"))
    proto = next((p.partition("=")[2] for p in params if p.startswith("proto=")), "prometheus.WriteRequest")
    if media.lower() != "application/x-protobuf" or proto != "prometheus.WriteRequest":
        raise _Answer(415, f"content-type {ctype!r}: only remote write 1.0 (prometheus.WriteRequest)")


async def _read(receive: Receive, scope: Scope, limit: int) -> bytes:
    too_large = _Answer(413, f"request body larger than {limit} bytes")
    declared = dict(scope.get("headers") or []).get(b"content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_large
        except ValueError:
            raise _Answer(400, "unreadable content-length") from None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Answer(400, "the client left before the body ended")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:  # a chunked body, or one longer than it declared
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _take(receiver: Receiver, body: bytes) -> None:
    try:
        receiver.receive(body)
    except BadBody as e:
        raise _Answer(400, str(e)) from e
    except TooLarge as e:
        raise _Answer(413, str(e)) from e
    except BufferFull as e:
        raise _Answer(429, str(e), {"retry-after": str(e.retry_after_s)}) from e


async def _send(send: Send, status: int, payload: Any, headers: dict[str, str]) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    if payload is not None:
        raw += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
