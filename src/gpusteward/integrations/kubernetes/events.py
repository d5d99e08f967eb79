"""Kubernetes Events (events.k8s.io/v1) on a workload's pods: what gpusteward saw and did.

``kubectl describe pod`` and every dashboard then show the notice next to the pod. Posting
is best effort: an Event that cannot be written is logged, never fails the action.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import Level, Notice, Workload
from gpusteward.domain.ports import Clock, Notifier, SystemClock
from gpusteward.integrations.kubernetes.control import EVENTS, KubeControl, micro_time
from gpusteward.integrations.kubernetes.podref import pods_of

log = logging.getLogger(__name__)

CONTROLLER = "gpusteward.io/steward"


class EventPoster:
    def __init__(self, api: KubeControl, *, clock: Clock | None = None, instance: str = "") -> None:
        self.api = api
        self.clock = clock or SystemClock()
        self.instance = instance or os.environ.get("POD_NAME") or socket.gethostname()
        #: Events written (tests).
        self.posted = 0

    def post(self, workload: Workload, action: str, reason: str, note: str, kind: str = "Normal") -> None:
        ns = workload.ref.get("namespace", "")
        for name, uid in pods_of(workload.ref):
            body = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"generateName": f"{name}.gpusteward-", "namespace": ns},
                "eventTime": micro_time(self.clock.now()),
                "reportingController": CONTROLLER,
                "reportingInstance": self.instance[:128],
                "action": action,
                # Event reasons are UpperCamelCase words: "idle-allocation" → "IdleAllocation".
                "reason": "".join(w.capitalize() for w in reason.replace("_", "-").split("-") if w)[:128]
                or "GpuWaste",
                "note": note[:1024],
                "type": kind,
                "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name, "uid": uid},
            }
            try:
                reply = self.api.create(EVENTS, ns, body)
            except SourceError as e:
                log.warning("event on pod %s/%s not posted: %s", ns, name, e)
                continue
            if reply.ok:
                self.posted += 1
            else:
                log.warning(
                    "event on pod %s/%s not posted: HTTP %s %s", ns, name, reply.status, reply.message
                )


class EventNotifier:
    """A ``Notifier`` that passes each notice on and, for a Kubernetes workload, posts it as an
    Event on its pods too (L1: the owner sees the warning in ``kubectl describe pod``)."""

    def __init__(
        self, inner: Notifier, poster: EventPoster, lookup: Callable[[str], Workload | None]
    ) -> None:
        self.inner = inner
        self.poster = poster
        self.lookup = lookup

    def send(self, notice: Notice) -> None:
        self.inner.send(notice)
        workload = self.lookup(notice.workload_id)
        if workload is None:
            return
        rule = notice.subject.rsplit("(", 1)[-1].rstrip(")") if "(" in notice.subject else "gpu-waste"
        kind = "Normal" if notice.level <= Level.NOTIFY else "Warning"
        self.poster.post(workload, "Notify", rule, f"{notice.subject}\n{notice.body}", kind)
