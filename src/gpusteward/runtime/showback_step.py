"""The showback's housekeeping, run by the leader after the ledger each tick (at most every
``budgets.check_every_minutes``):

* **Closing months**: a month with showback rows is closed ``showback.close_after_days`` after it
  ends (``gpusteward showback close`` does it by hand), so finance's figures stop moving; the
  ledger then puts late amounts on the day they arrive.
* **Budget alerts**: each team with a budget (``budgets.teams``) is told once per month and alert
  share (50 / 80 / 100 % by default) with the burn-rate forecast, on its own notify route or the
  one its budget names, in that route's language. What was sent is kept in the store's documents
  (``showback.budget_alerts``), so a restart or a second replica taking over repeats nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from gpusteward.analysis import budgets as budget_figures
from gpusteward.analysis.budgets import BudgetSettings, BudgetStatus, TeamBudget
from gpusteward.analysis.showback import (
    ShowbackSettings,
    month_of_time,
    month_range,
    previous_month,
    read_month,
    team_totals,
)
from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import Notice, Owner
from gpusteward.domain.ports import Notifier
from gpusteward.domain.records import AuditNote
from gpusteward.domain.store_ports import Docs, HasLedger, NoticeLog
from gpusteward.notify.apprise_notifier import Templates
from gpusteward.notify.settings import NotifySettings

if TYPE_CHECKING:
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)

ALERTS_DOC = "showback.budget_alerts"
#: How many ended months a check looks back over for ones still open.
LOOK_BACK_MONTHS = 12


class ShowbackStore(HasLedger, Docs, NoticeLog, Protocol):
    """The ledger, the documents that remember sent alerts, and the notices table."""


def budget_notice(
    s: BudgetStatus, budget: TeamBudget, share: float, *, at: datetime, language: str, currency: str, web: str
) -> Notice:
    """The alert for ``share`` crossed, in ``language`` (notify/messages/<language>/budget.md.j2)."""
    context: dict[str, Any] = {
        "team": s.team,
        "month": s.month,
        "share": share,
        "spent_share": s.share,
        "spent": s.spent,
        "budget": s.budget,
        "unit": currency if s.unit == "money" else "GPU-hours",
        "burn_per_day": s.burn_per_day,
        "forecast": s.forecast,
        "runout_day": s.runout_day,
        "web": web,
    }
    msg = Templates().render("budget", "md", language, context)
    return Notice(
        at=at,
        # "budget:" tells a notifier this is no workload's notice (its text is complete).
        workload_id=f"budget:{s.team}",
        owner=Owner(user=f"budget:{s.team}", team=budget.channel or s.team),
        subject=msg.title,
        body=msg.body,
        dedup_key=f"budget:{s.team}:{s.month}:{share:g}",
    )


class ShowbackStep:
    def __init__(
        self,
        store: ShowbackStore,
        notifier: Notifier,
        *,
        showback: ShowbackSettings,
        budgets: BudgetSettings,
        notify: NotifySettings,
        currency: str,
        web_url: str = "",
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.showback = showback
        self.budgets = budgets
        self.notify = notify
        self.currency = currency
        self.web_url = web_url
        self._checked_at: datetime | None = None

    def run(self, now: datetime) -> list[Notice]:
        """Close what is due and send the alerts due; returns the alerts sent."""
        every = timedelta(minutes=self.budgets.check_every_minutes)
        if self._checked_at is not None and now - self._checked_at < every:
            return []
        self._checked_at = now
        try:
            self.close_due(now)
            return self.alert(now)
        except StoreError:
            # After the actions: a store that cannot be read must not fail the tick; next check retries.
            log.exception("showback: months not closed, budgets not checked; tried again next check")
            self._checked_at = None
            return []

    def close_due(self, now: datetime) -> list[str]:
        """Close the ended months (up to a year back) that have rows and are due; returns them."""
        ledger = self.store.ledger
        closed = ledger.closed_months()
        month, done = previous_month(month_of_time(now)), []
        for _ in range(LOOK_BACK_MONTHS):
            start, end = month_range(month)
            due = now.date() >= end + timedelta(days=self.showback.close_after_days)
            if due and month not in closed and ledger.showback(start, end) and ledger.close_month(month, now):
                log.info("showback: closed %s (%d days after it ended)", month, (now.date() - end).days)
                done.append(month)
            month = previous_month(month)
        return done

    def _language(self, budget: TeamBudget, team: str) -> str:
        route = self.notify.teams.get(budget.channel or team) or self.notify.default
        return (route.language if route else None) or self.notify.language

    def _send(self, notice: Notice) -> bool:
        """Through the throttle's ``deliver`` where there is one (it says whether it went out)."""
        deliver = getattr(self.notifier, "deliver", None)
        if callable(deliver):
            return bool(deliver(notice))
        self.notifier.send(notice)
        return True

    def alert(self, now: datetime) -> list[Notice]:
        if not self.budgets.teams:
            return []
        month = month_of_time(now)
        rows, _ = read_month(self.store.ledger, month)
        totals = {t.team: t for t in team_totals(rows)}
        doc = self.store.load_doc(ALERTS_DOC) or {}
        sent_this_month: dict[str, list[float]] = {k: list(v) for k, v in doc.get(month, {}).items()}
        out = []
        for team, budget in sorted(self.budgets.teams.items()):
            s = budget_figures.status(team, budget, month, totals.get(team), now)
            already = set(sent_this_month.get(team, []))
            due = [share for share in s.crossed if share not in already]
            if not due:
                continue
            # Crossing several shares at once (a restart, a big day) says only the highest.
            notice = budget_notice(
                s, budget, due[-1], at=now, language=self._language(budget, team), currency=self.currency,
                web=self.web_url,
            )  # fmt: skip
            sent = self._send(notice)
            self.store.record_notice(notice, sent=sent)
            sent_this_month[team] = sorted(already | set(due))
            out.append(notice)
            log.info("budget of %s: %.0f %% of %s used; told %s", team, 100 * s.share, month, notice.owner)
        if out:
            # Only this month and the last are kept: older alerts can never be due again.
            keep = {m: v for m, v in doc.items() if m >= previous_month(month)}
            keep[month] = sent_this_month
            note = AuditNote("showback.budget_alerts", {"month": month, "teams": sorted(sent_this_month)})
            self.store.save_doc(ALERTS_DOC, keep, at=now, audit=note)
        return out


def build_showback(settings: Settings, store: ShowbackStore, notifier: Notifier) -> ShowbackStep:
    """The step from the config: its sections, the notify routes, the web's link base."""
    return ShowbackStep(
        store,
        notifier,
        showback=settings.showback,
        budgets=settings.budgets,
        notify=settings.notify,
        currency=settings.cost.currency,
        web_url=settings.web.base_url.rstrip("/") if settings.web.base_url else "",
    )
