"""Notice throttling: a ``Notifier`` wrapper so one owner is told enough, not flooded.

* one notice per ``dedup_key`` (a workload's escalation step in one waste episode);
* at most ``policy.notices.max_per_owner_per_day`` notices per owner per UTC day; the rest are
  held back and sent as one digest per owner when the day is over (``flush``, every tick);
* admins' notices (``owner`` None: approval requests) are never held back.

``deliver`` says whether a notice went out, so the runner records held ones as not sent: what
was suppressed stays in the notices table. After a restart the day's counts and the pending
digests (held notices of the last ``DIGEST_LOOKBACK`` days) are rebuilt from that table. A sent
digest is recorded with the key ``digest:<owner>:<day>`` and never sent again; one whose channel
failed is not recorded, so the next start-up tries it again.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta

from gpusteward.domain.models import Level, Notice, Owner
from gpusteward.domain.ports import Notifier
from gpusteward.domain.store_ports import NoticeLog
from gpusteward.policy.settings import NoticeSettings

log = logging.getLogger(__name__)

#: How far back a start-up looks for held notices whose digest was never sent.
DIGEST_LOOKBACK = timedelta(days=7)
_DRY_RUN = "[dry-run] "


class ThrottledNotifier:
    """Implements ``Notifier`` (plus ``deliver`` and ``flush``) around another notifier."""

    def __init__(self, inner: Notifier, store: NoticeLog, settings: NoticeSettings) -> None:
        self.inner = inner
        self.store = store
        self.settings = settings
        self._day: date | None = None
        self._counts: Counter[str] = Counter()
        self._keys: set[str] = set()
        #: Held notices by (UTC day, owner), sent as that owner's digest once the day is over.
        self._held: dict[tuple[date, str], list[Notice]] = {}
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
            self._held.setdefault((self._day_of(notice.at), user), []).append(notice)
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

    @staticmethod
    def _day_of(at: datetime) -> date:
        return at.astimezone(UTC).date()

    def _roll(self, at: datetime) -> None:
        day = self._day_of(at)
        if day == self._day:
            return
        if self._day is None:
            self._rebuild_held(day)
        self._day = day
        self._send_digests(day, at)
        self._counts, self._keys = Counter(), set()
        start = datetime.combine(day, time(), tzinfo=UTC)
        for record in self.store.notices_since(start):
            n = record.notice
            if record.sent and n.owner is not None:
                self._counts[n.owner.user] += 1
                if n.dedup_key:
                    self._keys.add(n.dedup_key)

    def _rebuild_held(self, today: date) -> None:
        """The held notices of recent days whose digest was not sent (a restart lost them)."""
        start = datetime.combine(today - DIGEST_LOOKBACK, time(), tzinfo=UTC)
        records = self.store.notices_since(start)
        sent_keys = {r.notice.dedup_key for r in records if r.sent and r.notice.dedup_key}
        for r in records:
            n = r.notice
            if r.sent or n.owner is None or n.subject.startswith(_DRY_RUN):
                continue
            if n.dedup_key and n.dedup_key in sent_keys:
                continue  # a repeat of a notice that went out, not a held one
            day = self._day_of(n.at)
            if f"digest:{n.owner.user}:{day:%Y-%m-%d}" in sent_keys:
                continue
            self._held.setdefault((day, n.owner.user), []).append(n)
            self._owners[n.owner.user] = n.owner

    def _send_digests(self, today: date, at: datetime) -> None:
        """One digest per owner and past day with held notices."""
        due = sorted(k for k in self._held if k[0] < today)
        for day, user in due:
            notices = self._held.pop((day, user))
            key = f"digest:{user}:{day:%Y-%m-%d}"
            if self.store.notice_sent(key):
                continue  # sent before a restart: once only
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
                dedup_key=key,
            )
            try:
                self.inner.send(digest)
                self.store.record_notice(digest, sent=True)
            except Exception:  # one owner's channel failing must not lose the others' digests
                log.exception("digest to %s not sent (tried again at the next start-up)", user)
