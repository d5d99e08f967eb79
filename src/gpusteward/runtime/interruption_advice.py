"""Which workloads keep being interrupted without ever checkpointing: a running count per workload
(its owner, kind and name, across incarnations) in the store's document ``interruptions``, and the
advice lines drawn from it (``gpusteward`` report and logs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpusteward.domain.cloud import InterruptionNotice
from gpusteward.domain.models import ActionStatus, Level, Workload
from gpusteward.domain.store_ports import Docs

if TYPE_CHECKING:
    from gpusteward.runtime.runner import ActionResult

DOC_KEY = "interruptions"
#: Interruptions without a checkpoint after which a workload is advised to add one.
ADVISE_AFTER = 3
_KEEP = 2000


def workload_key(w: Workload) -> str:
    return f"{w.owner.user}/{w.kind.value}/{w.name}"


class InterruptionRecord:
    def __init__(self, store: Docs) -> None:
        self.store = store

    def counts(self) -> dict[str, dict[str, Any]]:
        doc = self.store.load_doc(DOC_KEY)
        return dict(doc) if isinstance(doc, Mapping) else {}

    def add(
        self,
        notice: InterruptionNotice,
        ran: Sequence[ActionResult],
        workloads: Mapping[str, Workload],
        now: datetime,
    ) -> list[str]:
        """Count one interruption for each workload in ``ran``, and whether it got its signal;
        returns the advice lines of workloads that reached ``ADVISE_AFTER`` just now."""
        doc = self.counts()
        crossed = []
        for r in ran:
            w = workloads.get(r.decision.workload_id)
            if w is None:
                continue
            entry = dict(doc.get(workload_key(w), {}))
            entry["interrupted"] = int(entry.get("interrupted", 0)) + 1
            signalled = r.decision.level is Level.GRACEFUL_STOP and r.status is ActionStatus.SUCCEEDED
            entry["checkpointed"] = int(entry.get("checkpointed", 0)) + int(signalled)
            entry["last"] = now.isoformat()
            entry["last_node"] = notice.node
            doc[workload_key(w)] = entry
            if entry["interrupted"] == ADVISE_AFTER and entry["checkpointed"] == 0:
                crossed.append(advice_line(workload_key(w), ADVISE_AFTER))
        if len(doc) > _KEEP:  # the most recently interrupted ones
            doc = dict(sorted(doc.items(), key=lambda kv: str(kv[1].get("last", "")))[-_KEEP:])
        self.store.save_doc(DOC_KEY, doc, at=now)
        return crossed

    def advice(self, *, after: int = ADVISE_AFTER) -> list[str]:
        """One line per workload interrupted at least ``after`` times that never checkpointed."""
        lines = []
        for key, entry in sorted(self.counts().items()):
            n, saved = int(entry.get("interrupted", 0)), int(entry.get("checkpointed", 0))
            if n >= after and saved == 0:
                lines.append(advice_line(key, n))
        return lines


def advice_line(key: str, interrupted: int) -> str:
    return (
        f"{key}: interrupted {interrupted} times on spot nodes and never checkpointed; give it a "
        "checkpoint signal (gpusteward.io/checkpoint-signal or GPUSTEWARD_CHECKPOINT_SIGNAL) "
        "or run it on on-demand nodes"
    )
