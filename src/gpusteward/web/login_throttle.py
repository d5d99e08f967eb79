"""Failed logins: each one audited with its source address, and throttled.

A caller that failed ``max_failures`` times within ``window_s`` (by source address, or by the
first characters of the token it tried) waits until the oldest of those failures leaves the
window: the login form and the API answer 429 with ``Retry-After``. Correct tokens wait too, or
a guesser would learn from the answer. The window is in memory and bounded: at most
``max_failures`` times per key and ``max_keys`` keys, the least recently failed key dropped first.
It is per process (``serve`` and ``run --web`` each count their own; each of ``serve --workers``
processes allows its share of the limit, ``web.workers``).

Behind a proxy the source address is the proxy's unless uvicorn is told to trust its
``X-Forwarded-For`` (``--proxy-headers``, ``--forwarded-allow-ips``).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from datetime import datetime

from fastapi import Request

from gpusteward.store.db import StateStore

#: Characters of a tried token that key its throttle: "gst_" and 8 of its random characters.
PREFIX_CHARS = 12


class FailureWindow:
    """Failure times per key in a sliding window, within fixed memory."""

    def __init__(self, *, max_failures: int, window_s: float, max_keys: int) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_keys = max_keys
        self._times: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()  # sync routes run on a thread pool

    def wait_s(self, key: str, now: float) -> int:
        """Whole seconds ``key`` must wait before its next try; 0 when it may try now."""
        with self._lock:
            times = self._times.get(key)
            if times is None:
                return 0
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if not times:
                del self._times[key]
                return 0
            if len(times) < self.max_failures:
                return 0
            return max(1, math.ceil(times[0] + self.window_s - now))

    def fail(self, key: str, now: float) -> None:
        with self._lock:
            times = self._times.pop(key, None) or deque(maxlen=self.max_failures)
            times.append(now)
            self._times[key] = times  # now the most recent
            while len(self._times) > self.max_keys:
                self._times.popitem(last=False)

    def __len__(self) -> int:
        return len(self._times)


def source_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class LoginGuard:
    """The throttle and the audit of failed logins (the form and bearer tokens alike)."""

    def __init__(
        self, store: StateStore, *, max_failures: int = 10, window_s: float = 300, max_keys: int = 10_000
    ) -> None:
        self.store = store
        self.window = FailureWindow(max_failures=max_failures, window_s=window_s, max_keys=max_keys)

    @staticmethod
    def _keys(request: Request, token: str) -> list[str]:
        keys = [f"addr:{source_address(request)}"]
        if token:
            keys.append(f"token:{token[:PREFIX_CHARS]}")
        return keys

    def wait_s(self, request: Request, token: str, now: datetime) -> int:
        """Seconds this caller must wait before trying ``token``; 0 when it may try now."""
        at = now.timestamp()
        return max(self.window.wait_s(k, at) for k in self._keys(request, token))

    def failed(self, request: Request, token: str, now: datetime, *, via: str) -> None:
        """Count a failure and audit it (only tries that were let through reach here, so the
        throttle bounds the audit records too). The tried token itself is never recorded."""
        for k in self._keys(request, token):
            self.window.fail(k, now.timestamp())
        self.store.audit("web.login_failed", now, None, address=source_address(request), via=via)
