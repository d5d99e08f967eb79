"""A bound on request bodies, applied before any route reads one.

FastAPI reads a whole JSON or form body into memory before validation can look at its size,
so a 400 MB POST would cost 400 MB before a ``max_length`` could refuse it. This pure ASGI
middleware answers 413 from ``Content-Length`` at once, and counts chunked bodies as they
stream in, cutting them off at the limit.
"""

from __future__ import annotations

import json

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY_BYTES = 1_048_576


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                too_large = True  # a body whose length cannot be read is not read
            if too_large:
                await self._refuse(send)
                return
        seen = 0
        started = refused = False

        async def counting_receive() -> Message:
            # Past the limit the app is told the client left (so it stops reading) and the 413
            # goes out here; FastAPI would turn an exception raised in here into a 400.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 has been sent; whatever the app answers after it is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except ClientDisconnect:
            if not refused:
                raise

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
