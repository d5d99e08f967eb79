"""Leader election with a coordination.k8s.io/v1 Lease: only the holder acts.

The same protocol as client-go's leader election, without its blocking loop: ``acquire``
is called once per tick. The holder renews ``renewTime``; another replica takes the Lease
only when it has seen the same record unchanged for ``leaseDurationSeconds`` by its own
monotonic clock (never by comparing wall clocks across machines), or when the holder is
empty (released). Every write carries the resourceVersion read, so of two replicas racing
for an expired Lease one gets 409 Conflict and stays a follower.

The official client's ``leaderelection`` package runs its own blocking loop on the global
client configuration; the ``Leadership`` protocol needs a non-blocking step on our client.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import uuid
from typing import Any

from gpusteward.domain.errors import SourceError
from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.integrations.kubernetes.control import LEASES, KubeControl, micro_time

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaseLeadership:
    """Implements ``gpusteward.domain.ports.Leadership`` with a Lease."""

    name = "kubernetes-lease"

    def __init__(
        self,
        api: KubeControl,
        *,
        namespace: str,
        lease_name: str = "gpusteward-leader",
        lease_s: float = 15.0,
        identity: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.lease_name = lease_name
        self.lease_s = max(1, math.ceil(lease_s))
        self.identity = identity or default_identity()
        self.clock = clock or SystemClock()
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None

    @property
    def leading(self) -> bool:
        """Whether the last renewal is recent enough to act on (also while the API is unreachable)."""
        return self._renewed_at is not None and self.clock.monotonic() - self._renewed_at < self.lease_s

    def _spec(self, old: dict[str, Any] | None) -> dict[str, Any]:
        now = micro_time(self.clock.now())
        old = old or {}
        mine = old.get("holderIdentity") == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_s,
            "acquireTime": old.get("acquireTime") if mine and old.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if mine or not old else 1),
        }

    def _won(self) -> bool:
        self._renewed_at = self.clock.monotonic()
        return True

    def _lost(self) -> bool:
        if self._renewed_at is not None:
            log.warning("leadership lost: %s no longer holds lease %s", self.identity, self.lease_name)
        self._renewed_at = None
        return False

    def acquire(self) -> bool:
        try:
            got = self.api.get(LEASES, self.namespace, self.lease_name)
            if got.status == 404:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.lease_name, "namespace": self.namespace},
                    "spec": self._spec(None),
                }
                made = self.api.create(LEASES, self.namespace, body)
                return self._won() if made.ok else self._lost()
            if not got.ok:
                log.warning("lease %s: HTTP %s %s", self.lease_name, got.status, got.message)
                return self.leading if self.leading else self._lost()
            lease = got.body
            spec = dict(lease.get("spec") or {})
            holder = str(spec.get("holderIdentity") or "")
            record = (holder, str(spec.get("renewTime") or ""), str(spec.get("leaseDurationSeconds") or ""))
            now = self.clock.monotonic()
            if record != self._observed:
                self._observed, self._observed_at = record, now
            duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
            if holder and holder != self.identity and now - self._observed_at < duration:
                return self._lost()
            body = {**lease, "spec": {**spec, **self._spec(spec)}}
            put = self.api.replace(LEASES, self.namespace, self.lease_name, body)
            if put.ok:
                new = put.body.get("spec") or {}
                self._observed = (self.identity, str(new.get("renewTime") or ""), str(self.lease_s))
                self._observed_at = now
                return self._won()
            if put.status != 409:
                log.warning("lease %s: HTTP %s %s", self.lease_name, put.status, put.message)
            return self._lost()
        except SourceError as e:
            # Unreachable API: keep acting only while our own last renewal is still valid.
            log.warning("lease %s unreachable: %s", self.lease_name, e)
            return self.leading if self.leading else self._lost()

    def release(self) -> None:
        """Empty the holder (and shorten the lease) so the other replica takes over at once."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            got = self.api.get(LEASES, self.namespace, self.lease_name)
            if not got.ok:
                return
            spec = dict(got.body.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=micro_time(self.clock.now()))
            self.api.replace(LEASES, self.namespace, self.lease_name, {**got.body, "spec": spec})
        except SourceError as e:
            log.warning("lease %s not released: %s", self.lease_name, e)
