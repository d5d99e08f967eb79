"""What every route needs, built once by the app factory: store, settings, rules, auth, clock,
live data, and the owner controls (approve, reject, snooze, appeal) and the roll-out's admin
controls (promote, settle a false kill) with their error mapping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.errors import ControlError
from gpusteward.domain.models import Gpu
from gpusteward.domain.ports import Clock
from gpusteward.notify.links import LinkSigner
from gpusteward.policy.rollout import FalseKill
from gpusteward.runtime import owner_controls as controls
from gpusteward.runtime.config import Settings
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.rollout import RolloutBook, ScopeStatus
from gpusteward.store.access import AccessStore
from gpusteward.store.controls import ApprovalRecord, SnoozeRecord
from gpusteward.store.db import StateStore
from gpusteward.web.auth import Auth
from gpusteward.web.live import Live
from gpusteward.web.read_cache import ReadCache


@dataclass
class WebContext:
    store: StateStore
    settings: Settings
    rules: Sequence[CompiledRule]
    access: AccessStore
    auth: Auth
    clock: Clock
    live: Live
    links: LinkSigner
    #: Called after rules are saved from the rules page (``run --web`` swaps the loop's rules).
    on_rules_saved: Callable[[list[CompiledRule]], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def now(self) -> datetime:
        return self.clock.now()

    @property
    def reads(self) -> ReadCache:
        """The store's answers kept while its state is unchanged (``read_cache``): the one the
        caller's token is read through."""
        return self.auth.reads

    def steward(self) -> Steward | None:
        return self.live.steward()

    def gpus(self) -> dict[str, Gpu]:
        s = self.steward()
        return dict(s.gpus) if s is not None else {}

    @property
    def dry_run(self) -> bool:
        return self.settings.dry_run

    # -- owner controls: runtime.owner_controls, the CLI's checks; ControlError for refused requests --
    def decide(self, approval_id: int, *, approve: bool, by: str, reason: str) -> ApprovalRecord:
        return controls.decide_approval(
            self.store, approval_id, approve=approve, by=by, reason=reason, now=self.now()
        )

    def snooze(self, workload_id: str, *, hours: float, by: str, reason: str) -> SnoozeRecord:
        if not reason.strip():
            raise ControlError("a snooze needs a reason (it is shown to the owner and audited)")
        return controls.snooze_workload(
            self.store,
            self.settings.policy,
            self.rules,
            workload_id,
            hours=hours,
            by=by,
            reason=reason,
            now=self.now(),
        )

    def set_paused(self, paused: bool, *, by: str, reason: str) -> None:
        self.store.set_paused(paused, by=by, reason=reason, at=self.now())

    # -- the roll-out: runtime.rollout.RolloutBook, as the CLI uses it (audited there) ----------
    def rollout(self) -> RolloutBook:
        return RolloutBook(self.store, self.settings.policy)

    def promote(self, scope: str, *, by: str, force: bool, reason: str) -> ScopeStatus:
        if force and not reason.strip():
            raise ControlError("promoting without the criteria needs a reason")
        return self.rollout().promote(scope, self.now(), by=by, force=force, reason=reason)

    def settle_false_kill(self, fk_id: int, *, confirm: bool, by: str, reason: str) -> FalseKill:
        if not confirm and not reason.strip():
            raise ControlError("dismissing a false kill needs a reason")
        return self.rollout().verdict(fk_id, confirm=confirm, by=by, reason=reason, now=self.now())

    def appeal(self, workload_id: str, *, by: str, reason: str) -> None:
        self.rollout().appeal(workload_id, by=by, reason=reason, now=self.now())
