"""Interruption notices from this node's instance metadata service, one class per cloud.

- AWS (IMDSv2): ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``) gives a
  session token; ``GET /latest/meta-data/spot/instance-action`` with ``X-aws-ec2-metadata-token``
  answers 404 until the instance is marked, then ``{"action": "terminate|stop|hibernate", "time":
  "<UTC>"}``; ``/latest/meta-data/events/recommendations/rebalance`` answers ``{"noticeTime": ...}``.
- GCP: ``GET /computeMetadata/v1/instance/preempted`` (``Metadata-Flavor: Google``) answers ``TRUE``
  or ``FALSE``; the instance is stopped about 30 s after it turns TRUE.
- Azure: Scheduled Events ``GET /metadata/scheduledevents?api-version=2020-07-01`` (``Metadata:
  true``): an event of type ``Preempt`` whose ``Resources`` name this VM, ``NotBefore`` its time.

Anything but the documented answers (a connection refused, a 5xx, a body that does not parse) is a
``WatchFailed``: logged, backed off, and no notice.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import httpx

from gpusteward.domain.cloud import InterruptionNotice, NoticeKind
from gpusteward.domain.ports import Clock
from gpusteward.integrations.cloud.interruption.polling import PollingWatch, WatchFailed

log = logging.getLogger(__name__)

AWS_METADATA = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal"
AZURE_METADATA = "http://169.254.169.254"
#: How long each cloud warns before it takes a spot / preemptible instance.
WARNING_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
#: Seconds an IMDSv2 session token lives (the service allows up to 6 h).
TOKEN_TTL_S = 21600
_RAW = 500


def parse_time(text: str) -> datetime:
    """An RFC 3339 UTC time (``2026-12-01T19:00:00Z``) or an RFC 1123 one (Azure's NotBefore)."""
    t = text.strip()
    try:
        at = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        try:
            at = parsedate_to_datetime(t)
        except (TypeError, ValueError) as e:
            raise ValueError(f"not a time: {t!r}") from e
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


class MetadataWatch(PollingWatch):
    """One node's metadata service over HTTP (``httpx``; ``transport`` replaces the network in tests)."""

    provider = ""

    def __init__(
        self,
        base_url: str,
        node: str,
        clock: Clock,
        *,
        poll_s: float = 5.0,
        timeout_s: float = 2.0,
        backoff_max_s: float = 60.0,
        warning_s: float = 0.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(clock, poll_s=poll_s, backoff_max_s=backoff_max_s)
        self.base_url = base_url.rstrip("/")
        self.node = node
        self.warning_s = warning_s or WARNING_S[self.provider]
        # No proxy: the metadata service is link-local and must never be asked through one.
        self.http = httpx.Client(timeout=timeout_s, transport=transport, trust_env=False)
        self.instance_id = ""

    def _get(self, path: str, headers: dict[str, str], *, missing_ok: bool = False) -> httpx.Response | None:
        url = f"{self.base_url}{path}"
        try:
            r = self.http.get(url, headers=headers)
        except httpx.HTTPError as e:
            raise WatchFailed(f"GET {url} failed: {type(e).__name__}: {e}") from e
        if r.status_code == 404 and missing_ok:
            return None
        if r.status_code != 200:
            raise WatchFailed(f"GET {url} answered HTTP {r.status_code}: {r.text[:200]!r}")
        return r

    def _notice(
        self, kind: NoticeKind, deadline: datetime | None, now: datetime, raw: str
    ) -> InterruptionNotice:
        return InterruptionNotice(
            node=self.node,
            instance_id=self.instance_id,
            provider=self.provider,
            kind=kind,
            deadline=deadline,
            seen_at=now,
            via=self.via,
            raw=raw[:_RAW],
        )


class AwsImdsWatch(MetadataWatch):
    """EC2's instance metadata service, IMDSv2 (session tokens)."""

    provider = "aws"
    via = "imds"
    _token = ""
    _token_until = float("-inf")

    def _auth(self) -> dict[str, str]:
        if not self._token or self.clock.monotonic() >= self._token_until:
            url = f"{self.base_url}/latest/api/token"
            try:
                r = self.http.put(url, headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
            except httpx.HTTPError as e:
                raise WatchFailed(f"PUT {url} failed: {type(e).__name__}: {e}") from e
            if r.status_code != 200 or not r.text.strip():
                raise WatchFailed(f"PUT {url} answered HTTP {r.status_code}: no IMDSv2 token")
            self._token = r.text.strip()
            # Renewed well before it lapses.
            self._token_until = self.clock.monotonic() + TOKEN_TTL_S / 2
        return {"X-aws-ec2-metadata-token": self._token}

    def _read_json(self, path: str) -> dict[str, Any] | None:
        r = self._get(path, self._auth(), missing_ok=True)
        if r is not None and r.status_code == 200 and r.text.strip():
            try:
                body = json.loads(r.text)
            except ValueError as e:
                raise WatchFailed(f"{path}: not JSON: {r.text[:200]!r}") from e
            if not isinstance(body, dict):
                raise WatchFailed(f"{path}: not a JSON object: {r.text[:200]!r}")
            return body
        return None

    def read(self, now: datetime) -> list[InterruptionNotice]:
        try:
            return self._read(now)
        except WatchFailed as e:
            if "HTTP 401" in str(e):
                self._token = ""  # the token lapsed (or the service restarted): a new one next time
            raise

    def _read(self, now: datetime) -> list[InterruptionNotice]:
        if not self.instance_id:
            r = self._get("/latest/meta-data/instance-id", self._auth())
            self.instance_id = r.text.strip() if r is not None else ""
        out = []
        action = self._read_json("/latest/meta-data/spot/instance-action")
        if action is not None:
            try:
                deadline = parse_time(str(action["time"]))
            except (KeyError, ValueError) as e:
                raise WatchFailed(f"spot/instance-action without a valid time: {action}") from e
            out.append(self._notice(NoticeKind.INTERRUPTION, deadline, now, json.dumps(action)))
        rebalance = self._read_json("/latest/meta-data/events/recommendations/rebalance")
        if rebalance is not None:
            out.append(self._notice(NoticeKind.REBALANCE, None, now, json.dumps(rebalance)))
        return out


class GcpMetadataWatch(MetadataWatch):
    """Compute Engine's metadata server: ``instance/preempted``."""

    provider = "gcp"
    via = "gce-metadata"
    _HEADERS: ClassVar[dict[str, str]] = {"Metadata-Flavor": "Google"}
    _since: datetime | None = None

    def read(self, now: datetime) -> list[InterruptionNotice]:
        if not self.instance_id:
            r = self._get("/computeMetadata/v1/instance/id", self._HEADERS)
            self.instance_id = r.text.strip() if r is not None else ""
        r = self._get("/computeMetadata/v1/instance/preempted", self._HEADERS)
        answer = r.text.strip().upper() if r is not None else ""
        if answer == "FALSE":
            self._since = None
            return []
        if answer != "TRUE":
            raise WatchFailed(f"instance/preempted answered {answer[:50]!r}, not TRUE or FALSE")
        # The warning runs from the first poll that saw TRUE (GCP gives no time of its own).
        self._since = self._since or now
        return [
            self._notice(
                NoticeKind.INTERRUPTION, self._since + timedelta(seconds=self.warning_s), now, answer
            )
        ]


class AzureEventsWatch(MetadataWatch):
    """Azure's Scheduled Events: ``Preempt`` events for this VM."""

    provider = "azure"
    via = "azure-scheduled-events"
    _HEADERS: ClassVar[dict[str, str]] = {"Metadata": "true"}

    def read(self, now: datetime) -> list[InterruptionNotice]:
        if not self.instance_id:
            r = self._get("/metadata/instance/compute/name?api-version=2021-02-01&format=text", self._HEADERS)
            self.instance_id = r.text.strip() if r is not None else ""
        r = self._get("/metadata/scheduledevents?api-version=2020-07-01", self._HEADERS)
        try:
            doc = json.loads(r.text) if r is not None else {}
            events = doc.get("Events", [])
            if not isinstance(events, list):
                raise ValueError("Events is not a list")
        except (ValueError, AttributeError) as e:
            raise WatchFailed(
                f"scheduledevents: unreadable answer ({e}): {r.text[:200] if r else ''!r}"
            ) from e
        out = []
        for ev in events:
            if not isinstance(ev, dict) or ev.get("EventType") != "Preempt":
                continue
            resources = ev.get("Resources") or []
            if resources and self.instance_id not in resources:
                continue  # another VM of the scale set
            not_before = str(ev.get("NotBefore") or "")
            try:
                deadline = parse_time(not_before) if not_before else now + timedelta(seconds=self.warning_s)
            except ValueError as e:
                raise WatchFailed(f"Preempt event with an unreadable NotBefore: {not_before!r}") from e
            out.append(self._notice(NoticeKind.INTERRUPTION, deadline, now, json.dumps(ev)))
        return out


WATCHES: dict[str, tuple[type[MetadataWatch], str]] = {
    "aws": (AwsImdsWatch, AWS_METADATA),
    "gcp": (GcpMetadataWatch, GCP_METADATA),
    "azure": (AzureEventsWatch, AZURE_METADATA),
}
