"""A metadata service on loopback that answers as AWS's (IMDSv2), GCP's and Azure's do, for the
tests, the benchmark and a rehearsal of the response on a machine that is not a spot instance.

Set what it answers with ``aws_action`` / ``aws_rebalance`` (JSON objects), ``gcp_preempted``
(``TRUE``/``FALSE``) and ``azure_events`` (Scheduled Events' ``Events`` list); ``status`` makes
every answer that HTTP status (a broken service). IMDSv2 GETs without a valid token get 401, as
from AWS; ``expire_tokens`` invalidates those handed out.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TEXT = "text/plain"
_JSON = "application/json"


@dataclass
class MetadataState:
    instance_id: str = "i-0123456789abcdef0"
    aws_action: dict[str, Any] | None = None
    aws_rebalance: dict[str, Any] | None = None
    gcp_preempted: str = "FALSE"
    azure_events: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    tokens: set[str] = field(default_factory=set)
    #: Requests by "METHOD path" (without the query), to check what a client asked.
    hits: Counter[str] = field(default_factory=Counter)
    token_ttls: list[str] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the tests read ``hits``

    def _send(self, status: int, body: str, content_type: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        self._send(*self._put())

    def do_GET(self) -> None:
        self._send(*self._get())

    def _put(self) -> tuple[int, str, str]:
        st = self.server.state
        st.hits[f"PUT {self.path.split('?')[0]}"] += 1
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if st.status != 200:
            return st.status, "unavailable", _TEXT
        if self.path != "/latest/api/token" or not ttl:
            return 400, "Bad Request", _TEXT
        st.token_ttls.append(ttl)
        token = secrets.token_urlsafe(16)
        st.tokens.add(token)
        return 200, token, _TEXT

    def _get(self) -> tuple[int, str, str]:
        st = self.server.state
        path, _, query = self.path.partition("?")
        st.hits[f"GET {path}"] += 1
        if st.status != 200:
            return st.status, "unavailable", _TEXT
        if path.startswith("/latest/"):
            return self._aws(st, path)
        if path.startswith("/computeMetadata/v1/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return 403, "Missing Metadata-Flavor:Google header.", _TEXT
            answers = {
                "/computeMetadata/v1/instance/id": st.instance_id,
                "/computeMetadata/v1/instance/preempted": st.gcp_preempted,
            }
            return (200, answers[path], _TEXT) if path in answers else (404, "Not Found", _TEXT)
        if path.startswith("/metadata/"):
            if self.headers.get("Metadata") != "true" or "api-version=" not in query:
                return 400, json.dumps({"error": "Bad request"}), _JSON
            if path == "/metadata/instance/compute/name":
                return 200, st.instance_id, _TEXT
            if path == "/metadata/scheduledevents":
                doc = {"DocumentIncarnation": len(st.azure_events), "Events": st.azure_events}
                return 200, json.dumps(doc), _JSON
        return 404, "Not Found", _TEXT

    def _aws(self, st: MetadataState, path: str) -> tuple[int, str, str]:
        if self.headers.get("X-aws-ec2-metadata-token") not in st.tokens:
            return 401, "Unauthorized", _TEXT
        if path == "/latest/meta-data/instance-id":
            return 200, st.instance_id, _TEXT
        if path == "/latest/meta-data/spot/instance-action" and st.aws_action is not None:
            return 200, json.dumps(st.aws_action), _JSON
        if path == "/latest/meta-data/events/recommendations/rebalance" and st.aws_rebalance is not None:
            return 200, json.dumps(st.aws_rebalance), _JSON
        return 404, "Not Found", _TEXT


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: MetadataState


class MetadataEmulator:
    """``with MetadataEmulator() as md: md.url ...``: serves on a free loopback port."""

    def __init__(self, state: MetadataState | None = None) -> None:
        self.state = state or MetadataState()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def expire_tokens(self) -> None:
        self.state.tokens.clear()

    def __enter__(self) -> MetadataEmulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
