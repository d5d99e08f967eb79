"""The one choke point to a Prometheus-compatible HTTP API (Prometheus, VictoriaMetrics).

Every call is a form-encoded POST (shard regexes make long queries) with a timeout.
Whatever goes wrong — refused, timed out, 5xx, a body that is not a successful answer —
becomes a ``SourceError`` naming the query; ``TooManySamples`` says the server refused
the query's size, so the caller can split it further.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.prometheus.query import RawSeries, parse_api_result

log = logging.getLogger(__name__)


class TooManySamples(SourceError):
    """The server refused a query for loading too many samples (``query.max-samples``)."""


@dataclass(frozen=True, slots=True)
class QueryResult:
    series: list[RawSeries]
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How to reach the server. ``verify``: True, False, or a CA bundle file."""

    url: str
    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None
    verify: bool | Path = True
    timeout_s: float = 10.0
    connect_timeout_s: float = 3.0
    headers: tuple[tuple[str, str], ...] = ()


def _cut(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "…"


class PrometheusClient:
    """``query`` and ``query_range`` against ``<url>/api/v1``."""

    def __init__(self, options: ClientOptions, transport: httpx.BaseTransport | None = None) -> None:
        self.options = options
        headers = dict(options.headers)
        if options.bearer_token:
            headers["Authorization"] = f"Bearer {options.bearer_token}"
        auth = (options.username, options.password or "") if options.username else None
        verify: bool | str = str(options.verify) if isinstance(options.verify, Path) else options.verify
        self._http = httpx.Client(
            base_url=options.url.rstrip("/"),
            headers=headers,
            auth=auth,
            verify=verify,
            timeout=httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def query(self, expr: str, at: datetime) -> QueryResult:
        """An instant query at ``at``; a range selector (``m[60s]``) yields raw samples."""
        return self._call("/api/v1/query", {"query": expr, "time": f"{at.timestamp():.3f}"})

    def query_range(self, expr: str, start: datetime, end: datetime, step_s: float) -> QueryResult:
        return self._call(
            "/api/v1/query_range",
            {
                "query": expr,
                "start": f"{start.timestamp():.3f}",
                "end": f"{end.timestamp():.3f}",
                "step": f"{step_s:g}",
            },
        )

    def _call(self, path: str, form: dict[str, str]) -> QueryResult:
        what = f"{self.options.url}{path} {_cut(form['query'], 120)!r}"
        try:
            resp = self._http.post(path, data=form)
        except httpx.TimeoutException as e:
            raise SourceError(f"prometheus timed out after {self.options.timeout_s:g} s: {what}") from e
        except httpx.HTTPError as e:
            raise SourceError(f"prometheus unreachable ({type(e).__name__}: {_cut(str(e))}): {what}") from e
        if resp.status_code >= 500:
            raise SourceError(f"prometheus answered {resp.status_code}: {_cut(resp.text)}: {what}")
        try:
            body = resp.json()
        except ValueError as e:
            raise SourceError(
                f"prometheus answered {resp.status_code} with no JSON: {_cut(resp.text)}"
            ) from e
        try:
            series, warnings = parse_api_result(body)
        except SourceError as e:
            msg = f"prometheus answered {resp.status_code}: {e}: {what}"
            if "too many samples" in str(e):
                raise TooManySamples(msg) from e
            raise SourceError(msg) from e
        return QueryResult(series, warnings)
