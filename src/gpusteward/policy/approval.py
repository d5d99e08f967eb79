"""Which steps wait for a person, for every kind of step: ladder stops, parks, pool scales and
consolidation moves.

``policy.approval.min_level`` holds steps by level (L3 and L4 by default). A step that gives
capacity back (an unpark, a scale-up, a consolidation rollback) never waits: holding it would
only keep capacity away from the users who need it. The ladder's steps are gated inside
``decide``; the L4 plans (parks, scales, moves) by ``hold_for_approval`` with the same
``approval_gate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from gpusteward.domain.models import Decision
from gpusteward.policy.consolidation import SHARE, UNSHARE
from gpusteward.policy.health import DRAIN
from gpusteward.policy.instances import START, STOP
from gpusteward.policy.ladder import Step
from gpusteward.policy.owner import ApprovalView, approval_gate
from gpusteward.policy.parking import PARK, UNPARK
from gpusteward.policy.scaling import SCALE_DOWN, SCALE_UP
from gpusteward.policy.settings import ApprovalSettings

#: Steps that give capacity back.
NEVER_WAITS = frozenset({UNPARK.name, SCALE_UP.name, UNSHARE.name})
_INFRA_STEPS: dict[str, Step] = {
    s.name: s for s in (PARK, UNPARK, SCALE_DOWN, SCALE_UP, SHARE, UNSHARE, DRAIN, STOP, START)
}


def needs_approval(settings: ApprovalSettings | None, decision: Decision) -> bool:
    return (
        settings is not None and decision.step not in NEVER_WAITS and settings.needs_approval(decision.level)
    )


def hold_for_approval(
    decisions: Sequence[Decision],
    approvals: Mapping[str, ApprovalView] | None,
    now: datetime,
    settings: ApprovalSettings,
) -> list[Decision]:
    """``decisions`` with those that need an approval and have none in force held. ``approvals``
    (by idempotency key) is None in dry-run: a preview asks nobody."""
    if approvals is None:
        return list(decisions)
    out = []
    for d in decisions:
        if not d.acts or not needs_approval(settings, d):
            out.append(d)
            continue
        step = _INFRA_STEPS.get(d.step, Step(d.step, d.level, d.step))
        held = approval_gate(step, approvals.get(d.idempotency_key), now, settings.expire_hours)
        out.append(
            d
            if held is None
            else replace(d, hold=held.hold, reason=f"{d.reason}. The {step.title} is held: {held.reason}.")
        )
    return out
