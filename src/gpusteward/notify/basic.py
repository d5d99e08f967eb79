"""Notifiers that need no outside service: the log and an in-memory inbox.

Real channels (e-mail, Slack, webhooks) come through apprise in their own module.
"""

from __future__ import annotations

import logging

from gpusteward.domain.models import Notice

log = logging.getLogger(__name__)


class LogNotifier:
    """Writes each notice to the log: the default channel until one is configured."""

    def send(self, notice: Notice) -> None:
        to = notice.owner.user if notice.owner else "admins"
        log.info("notice to %s about %s: %s", to, notice.workload_id, notice.subject)


class MemoryNotifier:
    """Keeps notices in a list: the simulator's inbox, and the tests'."""

    def __init__(self) -> None:
        self.sent: list[Notice] = []

    def send(self, notice: Notice) -> None:
        self.sent.append(notice)
