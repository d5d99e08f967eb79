"""The 'interrupted often, never checkpointed' record: counted per workload across incarnations
in the store's ``interruptions`` document, advised once it reaches the threshold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP, InterruptionNotice, NoticeKind
from gpusteward.domain.models import ActionStatus, Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.runtime.interruption_advice import ADVISE_AFTER, InterruptionRecord
from gpusteward.runtime.runner import ActionResult
from gpusteward.store.memory import MemoryStore

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _workload(name: str, started: datetime) -> Workload:
    return Workload(f"job/{name}-{started:%H%M}", WorkloadKind.JOB, name, Owner("ann"), 1, ("G",), started)


def _ran(w: Workload, status: ActionStatus) -> ActionResult:
    d = Decision(w.id, T, Level.GRACEFUL_STOP, INTERRUPTION_CHECKPOINT_STEP, "spot", idempotency_key=w.id)
    return ActionResult(d, status, "")


def test_advised_once_the_threshold_is_reached_and_only_without_checkpoints() -> None:
    store = MemoryStore()
    record = InterruptionRecord(store)
    crossed: list[list[str]] = []
    for k in range(ADVISE_AFTER + 1):
        at = T + timedelta(hours=k)
        notice = InterruptionNotice("n1", f"i-{k}", "aws", NoticeKind.INTERRUPTION, at, at, "imds")
        # A new incarnation each time (the job was resubmitted): the same workload for the advice.
        silent, saver = _workload("silent", at), _workload("saver", at)
        ran = [_ran(silent, ActionStatus.SKIPPED), _ran(saver, ActionStatus.SUCCEEDED)]
        crossed.append(record.add(notice, ran, {silent.id: silent, saver.id: saver}, at))
    assert [len(c) for c in crossed] == [0] * (ADVISE_AFTER - 1) + [1, 0]  # said once, when reached
    assert crossed[ADVISE_AFTER - 1][0].startswith(f"ann/job/silent: interrupted {ADVISE_AFTER} times")
    [line] = record.advice()
    assert line.startswith(f"ann/job/silent: interrupted {ADVISE_AFTER + 1} times")
    counts = record.counts()
    assert counts["ann/job/saver"]["checkpointed"] == ADVISE_AFTER + 1
