"""The hub's pull loop: every ``interval_seconds`` the leader pulls each member that is due and
writes what came back; a member that fails is retried with doubling waits (up to
``backoff_max_seconds``), with one log line per failure. Only the replica holding the
PostgreSQL advisory lock (``store.leadership.PostgresLeadership`` on the hub's schema) pulls and
writes; the other serves the pages from the same database and takes over when the lock frees.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.engine import make_url

from gpusteward.domain.errors import StoreError
from gpusteward.domain.ports import Leadership
from gpusteward.hub.pull import PullError, client_for, pull_member
from gpusteward.hub.settings import HubSettings, MemberSettings
from gpusteward.hub.store import HubStore
from gpusteward.store.leadership import PostgresLeadership

log = logging.getLogger(__name__)


def hub_leadership(settings: HubSettings) -> PostgresLeadership:
    """The advisory lock on the hub's schema (so a member sharing the database is not a rival)."""
    url = make_url(settings.store_url).update_query_dict(
        {"options": f"-csearch_path={settings.store_schema}"}
    )
    return PostgresLeadership(
        url.render_as_string(hide_password=False),
        lease_name="gpusteward-hub",
        lease_seconds=settings.lease_seconds,
    )


@dataclass
class _Due:
    at_s: float = 0.0  #: monotonic time of the next try
    failures: int = 0


@dataclass
class HubPuller:
    settings: HubSettings
    store: HubStore
    leadership: Leadership
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    monotonic: Callable[[], float] = time.monotonic
    _due: dict[str, _Due] = field(default_factory=dict)

    def pull_one(self, member: MemberSettings) -> bool:
        """Pull one member and store what came; False (and the failure noted) when it did not answer."""
        at = self.now()
        try:
            with client_for(member, self.settings.timeout_seconds) as client:
                got = pull_member(
                    client,
                    newest_action_id=self.store.newest_action_id(member.name),
                    page_size=self.settings.page_size,
                    max_pages=self.settings.max_pages,
                    today=at.date(),
                )
        except PullError as e:
            failures = self.store.record_failure(member.name, member.url, at, str(e))
            log.warning("member %s (%s) not pulled (failure %d): %s", member.name, member.url, failures, e)
            return False
        try:
            self.store.record_pull(member.name, member.url, at, got)
        except (KeyError, TypeError, ValueError) as e:  # a field of an unexpected shape: nothing written
            error = f"the member answered something unexpected: {type(e).__name__}: {e}"
            self.store.record_failure(member.name, member.url, at, error)
            log.warning("member %s (%s) not stored: %s", member.name, member.url, error)
            return False
        remote = str(got.overview.get("cluster") or "")
        if remote and remote != member.name:
            log.warning(
                "member %s calls itself %r (web.cluster_name): keyed as %s", member.name, remote, member.name
            )
        return True

    def tick(self) -> int:
        """Pull the members that are due (leader only); returns how many were pulled."""
        if not self.leadership.acquire():
            return 0
        pulled = 0
        for member in self.settings.members:
            due = self._due.setdefault(member.name, _Due())
            if self.monotonic() < due.at_s:
                continue
            try:
                ok = self.pull_one(member)
            except StoreError as e:  # the hub's own database: try again next round
                log.error("hub store unavailable while writing %s: %s", member.name, e)
                return pulled
            due.failures = 0 if ok else due.failures + 1
            wait = self.settings.interval_seconds * (2 ** min(due.failures - 1, 20) if due.failures else 1)
            due.at_s = self.monotonic() + min(
                wait, max(self.settings.backoff_max_seconds, self.settings.interval_seconds)
            )
            pulled += ok
        return pulled

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set; wakes often enough to keep (or take over) the leadership lock."""
        step = min(self.settings.interval_seconds, self.settings.lease_seconds / 3)
        while not stop.is_set():
            try:
                self.tick()
            except StoreError as e:
                log.error("hub store unavailable: %s", e)
            except Exception:  # the pull thread must not die quietly while the pages go on
                log.exception("hub pull round failed")
            stop.wait(step)
        self.leadership.release()
