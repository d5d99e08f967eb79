"""The words of a notice. An owner must learn what was seen, what happens next, and how to object."""

from __future__ import annotations

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


def notice_for(decision: Decision, workload: Workload, *, dry_run: bool) -> Notice:
    """A notice to the workload's owner about ``decision``."""
    prefix = "[dry-run] " if dry_run else ""
    advice = decision.step == "advice"
    what = "Advice" if advice else _WHAT.get(decision.level, "Notice")
    subject = f"{prefix}{what}: {workload.name} ({decision.rule or 'gpu waste'})"
    body = "\n\n".join(
        [
            f"Hello {workload.owner.user},",
            decision.reason,
            f"Workload: {workload.kind.value} {workload.name} (id {workload.id}), "
            f"GPUs: {', '.join(decision.gpu_uuids or workload.gpu_uuids)}.",
            _ADVICE_NOTE if advice else _HOW_TO_OBJECT,
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
