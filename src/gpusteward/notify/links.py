"""Signed tokens: one-click approve / snooze / appeal links in notices, and the web app's session cookie.

A token is ``base64url(JSON claims) "." base64url(HMAC-SHA256(key, purpose "." claims))``. The
claims carry an expiry (``exp``, epoch seconds) and a random nonce (``n``) that the web app
records when the link is used, so each link works once (``store.access.AccessStore.use_link``).
The purpose is inside the MAC: a session cookie is never accepted as a link, nor the reverse.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from gpusteward.domain.errors import StewardError


class LinkError(StewardError):
    """A signed token that is malformed, tampered with, for another purpose, or expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, purpose: str, body: str) -> str:
    return _b64(hmac.new(key, f"{purpose}.{body}".encode(), hashlib.sha256).digest())


def sign(key: bytes, purpose: str, claims: Mapping[str, Any], *, expires: datetime) -> str:
    """A token for ``claims`` (plain JSON values), valid for ``purpose`` until ``expires``."""
    data = {**claims, "exp": int(expires.timestamp()), "n": claims.get("n") or secrets.token_urlsafe(12)}
    body = _b64(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_mac(key, purpose, body)}"


def verify(key: bytes, purpose: str, token: str, *, now: datetime) -> dict[str, Any]:
    """The claims of a valid token; ``LinkError`` saying why otherwise."""
    body, dot, mac = token.strip().partition(".")
    if not dot or not body or not mac:
        raise LinkError("not a signed link")
    if not hmac.compare_digest(mac.encode(), _mac(key, purpose, body).encode()):
        raise LinkError("the link's signature does not match: it was altered or is not ours")
    try:
        claims = json.loads(_unb64(body))
    except (ValueError, UnicodeDecodeError) as e:
        raise LinkError("the link's contents cannot be read") from e
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int):
        raise LinkError("the link carries no expiry")
    if now.timestamp() >= claims["exp"]:
        raise LinkError("the link has expired")
    return claims


class LinkSigner:
    """Makes the one-click links that notices carry, pointing at the web app (``base_url``)."""

    PURPOSE = "link"

    def __init__(self, key: bytes, base_url: str, *, ttl_hours: float = 24.0) -> None:
        self.key = key
        self.base_url = base_url.rstrip("/")
        self.ttl_hours = ttl_hours

    def _url(self, claims: Mapping[str, Any], now: datetime) -> str:
        token = sign(self.key, self.PURPOSE, claims, expires=now + timedelta(hours=self.ttl_hours))
        return f"{self.base_url}/l/{quote(token, safe='.')}"

    def approve_url(self, approval_id: int, *, to: str, now: datetime) -> str:
        return self._url({"do": "approve", "approval": approval_id, "to": to}, now)

    def reject_url(self, approval_id: int, *, to: str, now: datetime) -> str:
        return self._url({"do": "reject", "approval": approval_id, "to": to}, now)

    def snooze_url(self, workload_id: str, *, hours: float, to: str, now: datetime) -> str:
        return self._url({"do": "snooze", "workload": workload_id, "hours": hours, "to": to}, now)

    def appeal_url(self, workload_id: str, *, to: str, now: datetime) -> str:
        """The owner says a stop was wrong: recorded like ``gpusteward rollout appeal``."""
        return self._url({"do": "appeal", "workload": workload_id, "to": to}, now)
