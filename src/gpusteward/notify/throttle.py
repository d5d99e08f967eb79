"""Notice throttling: a ``Notifier`` wrapper so one owner is told enough, not flooded.

* one notice per ``dedup_key`` (a workload's escalation step in one waste episode);
* at most ``policy.notices.max_per_owner_per_day`` notices per owner per UTC day; the rest are
  held back and sent as one digest per owner when the day is over (``flush``, every tick);
* admins' notices (``owner`` None: approval requests) are never held back.

``deliver`` says whether a notice went out, so the runner records held ones as not sent: what
was suppressed stays in the notices table. The day's counts are rebuilt from that table after a
restart; a digest still pending when the agent stops is not rebuilt (its notices stay recorded).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, date, datetime, time

from gpusteward.domain.models import Level, Notice, Owner
from gpusteward.domain.ports import Notifier
from gpusteward.policy.settings import NoticeSettings
from gpusteward.store import queries
from gpusteward.store.db import StateStore

log = logging.getLogger(__name__)


class ThrottledNotifier:
    """Implements ``Notifier`` (plus ``deliver`` and ``flush``) around another notifier."""

    def __init__(self, inner: Notifier, store: StateStore, settings: NoticeSettings) -> None:
        self.inner = inner
        self.store = store
        self.settings = settings
        self._day: date | None = None
        self._counts: Counter[str] = Counter()
        self._keys: set[str] = set()
        self._held: dict[str, list[Notice]] = {}
        self._owners: dict[str, Owner] = {}

    def send(self, notice: Notice) -> None:
        self.deliver(notice)

    def deliver(self, notice: Notice) -> bool:
        """Send ``notice`` unless it repeats one already sent or its owner had enough today."""
        self._roll(notice.at)
        if notice.owner is None:
            self.inner.send(notice)
            return True
        if notice.dedup_key and notice.dedup_key in self._keys:
            log.info("notice %s already sent: not repeated", notice.dedup_key)
            return False
        user = notice.owner.user
        if self._counts[user] >= self.settings.max_per_owner_per_day:
            self._held.setdefault(user, []).append(notice)
            self._owners[user] = notice.owner
            log.info("notice to %s held for the digest (%d today)", user, self._counts[user])
            return False
        self.inner.send(notice)
        self._counts[user] += 1
        if notice.dedup_key:
            self._keys.add(notice.dedup_key)
        return True

    def flush(self, now: datetime) -> None:
        """Send the digests of a day that is over (called every tick)."""
        self._roll(now)

    def _roll(self, at: datetime) -> None:
        day = at.astimezone(UTC).date()
        if day == self._day:
            return
        if self._day is not None:
            self._send_digests(self._day, at)
        self._day = day
        self._counts, self._keys = Counter(), set()
        start = datetime.combine(day, time(), tzinfo=UTC)
        for record in queries.notices_since(self.store, start):
            n = record.notice
            if record.sent and n.owner is not None:
                self._counts[n.owner.user] += 1
                if n.dedup_key:
                    self._keys.add(n.dedup_key)

    def _send_digests(self, day: date, at: datetime) -> None:
        held, self._held = self._held, {}
        for user, notices in sorted(held.items()):
            lines = [f"- {n.at:%H:%M} UTC {n.subject} (workload {n.workload_id})" for n in notices]
            body = "\n".join(
                [
                    f"Hello {user},",
                    "",
                    f"gpusteward held back {len(notices)} notice(s) to you on {day:%Y-%m-%d} "
                    f"(at most {self.settings.max_per_owner_per_day} a day). In short:",
                    *lines,
                    "",
                    "`gpusteward explain WORKLOAD` shows each one in full.",
                ]
            )
            digest = Notice(
                at=at,
                workload_id="",
                owner=self._owners[user],
                subject=f"gpusteward digest: {len(notices)} more notice(s) from {day:%Y-%m-%d}",
                body=body,
                level=max((n.level for n in notices), default=Level.NOTIFY),
                dedup_key=f"digest:{user}:{day:%Y-%m-%d}",
            )
            try:
                self.inner.send(digest)
                self.store.record_notice(digest, sent=True)
            except Exception:  # one owner's channel failing must not lose the others' digests
                log.exception("digest to %s not sent", user)
