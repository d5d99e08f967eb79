"""The words of a notice. An owner must learn what was seen, what happens next, and how to object."""

from __future__ import annotations

import re
from typing import Any

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP
from gpusteward.domain.models import Decision, Level, Notice, Workload

_WHAT = {
    Level.NOTIFY: "Notice",
    Level.GRACEFUL_STOP: "Stopping (checkpoint first)",
    Level.FORCE: "Force-stopping",
    Level.INFRA: "Releasing infrastructure",
}

_HOW_TO_OBJECT = (
    "If this workload is doing useful work, add the label gpusteward.io/protect=true "
    "or gpusteward.io/exclude-until=<RFC 3339 time>, or ask your platform team to snooze it."
)


#: Advice (right-sizing, anomalies) is the advice ladder's one step: nothing follows it.
_ADVICE_NOTE = (
    "This is advice: gpusteward takes no action on it. Reply to your platform team if it is wrong "
    "for this workload; the weekly report lists it with the evidence."
)


#: A spot interruption's steps (runtime/interruption_step.py): the checkpoint and the requeue.
_INTERRUPTION_STEPS = (INTERRUPTION_CHECKPOINT_STEP, "requeue-before-interruption")
_INTERRUPTION_NOTE = (
    "gpusteward does not stop this workload: the cloud takes the node at the time above. A workload "
    "that saves on its checkpoint signal (gpusteward.io/checkpoint-signal) keeps its progress."
)


def is_interruption(notice: Notice) -> bool:
    """A notice of a spot interruption's step (its key starts with the step's name)."""
    return notice.dedup_key.startswith(tuple(f"{s}:" for s in _INTERRUPTION_STEPS))


def interruption_context(notice: Notice) -> dict[str, Any]:
    """What the interruption templates show besides the notice: its reason, the deadline, the step."""
    parts = notice.body.split("\n\n")
    reason = parts[1] if len(parts) > 1 else notice.body
    deadline = re.search(r"\bat (\d\d:\d\d:\d\d UTC)", reason)
    return {
        "reason": reason,
        "deadline": deadline.group(1) if deadline else "",
        "requeue": notice.dedup_key.startswith(f"{_INTERRUPTION_STEPS[1]}:"),
    }


def notice_for(decision: Decision, workload: Workload, *, dry_run: bool) -> Notice:
    """A notice to the workload's owner about ``decision``."""
    prefix = "[dry-run] " if dry_run else ""
    advice = decision.step == "advice"
    interruption = decision.step in _INTERRUPTION_STEPS
    what = "Advice" if advice else _WHAT.get(decision.level, "Notice")
    if interruption:
        what = "Spot interruption"
    subject = f"{prefix}{what}: {workload.name} ({decision.rule or 'gpu waste'})"
    body = "\n\n".join(
        [
            f"Hello {workload.owner.user},",
            decision.reason,
            f"Workload: {workload.kind.value} {workload.name} (id {workload.id}), "
            f"GPUs: {', '.join(decision.gpu_uuids or workload.gpu_uuids)}.",
            _INTERRUPTION_NOTE if interruption else _ADVICE_NOTE if advice else _HOW_TO_OBJECT,
        ]
    )
    return Notice(
        at=decision.at,
        workload_id=workload.id,
        owner=workload.owner,
        subject=subject,
        body=body,
        level=decision.level,
        dedup_key=decision.idempotency_key,
    )
