"""Leader election with a coordination.k8s.io Lease: two replicas against the fake API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from k8s_fakeapi import FakeApiServer

from gpusteward.domain.ports import Leadership
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.config import load_settings

from .k8s_cluster import lease_for

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def contenders(api_client: Any, clock: SimClock) -> tuple[Any, Any]:
    settings = load_settings(
        None, ha={"leader_election": "kubernetes-lease", "lease_namespace": "gpusteward", "lease_seconds": 15}
    )
    a = lease_for(settings, client=api_client, clock=clock)
    b = lease_for(settings, client=api_client, clock=clock)
    assert isinstance(a, Leadership)
    assert a.identity != b.identity
    return a, b


def test_only_one_acquires_and_the_other_takes_over_after_expiry(
    api_client: Any, server: FakeApiServer
) -> None:
    clock = SimClock(T0)
    a, b = contenders(api_client, clock)
    assert a.acquire() is True
    assert b.acquire() is False
    lease = server.cluster.get("coordination.k8s.io", "leases", "gpusteward", "gpusteward-leader")
    assert lease["spec"]["holderIdentity"] == a.identity
    assert lease["spec"]["leaseDurationSeconds"] == 15
    # The leader renews; the follower keeps seeing a live lease.
    for _ in range(5):
        clock.sleep(10)
        assert a.acquire() is True
        assert b.acquire() is False
    # The leader dies (stops renewing): after a full lease duration unchanged, b takes over.
    clock.sleep(10)
    assert b.acquire() is False
    clock.sleep(6)
    assert b.acquire() is True
    lease = server.cluster.get("coordination.k8s.io", "leases", "gpusteward", "gpusteward-leader")
    assert lease["spec"]["holderIdentity"] == b.identity
    assert lease["spec"]["leaseTransitions"] == 1
    # The old leader comes back: it sees the new holder and stays a follower.
    assert a.acquire() is False


def test_release_hands_over_at_once(api_client: Any, server: FakeApiServer) -> None:
    clock = SimClock(T0)
    a, b = contenders(api_client, clock)
    assert a.acquire()
    assert not b.acquire()
    a.release()
    assert b.acquire() is True
    assert a.acquire() is False


def test_racing_for_an_expired_lease_one_gets_409(api_client: Any, server: FakeApiServer) -> None:
    clock = SimClock(T0)
    a, b = contenders(api_client, clock)
    assert a.acquire()
    assert not b.acquire()
    clock.sleep(20)
    # Both read the expired lease; b writes first, a's write carries a stale resourceVersion.
    real_replace = a.api.replace

    def late_replace(*args: Any) -> Any:
        assert b.acquire() is True
        return real_replace(*args)

    c = lease_for(load_settings(None, ha={"lease_namespace": "gpusteward"}), client=api_client, clock=clock)
    assert not c.acquire()  # observes the record
    clock.sleep(20)
    c.api.replace = late_replace  # type: ignore[method-assign]
    assert c.acquire() is False
    puts = [x for x in server.cluster.calls if x.resource == "leases" and x.method == "PUT"]
    assert puts  # and the lease is b's
    lease = server.cluster.get("coordination.k8s.io", "leases", "gpusteward", "gpusteward-leader")
    assert lease["spec"]["holderIdentity"] == b.identity


def test_unreachable_api_keeps_leading_only_until_the_lease_would_expire(
    api_client: Any, server: FakeApiServer
) -> None:
    clock = SimClock(T0)
    a, _ = contenders(api_client, clock)
    assert a.acquire()
    server.cluster.fail("GET", r"/leases/gpusteward-leader$", 500, times=100)
    clock.sleep(5)
    assert a.acquire() is True
    clock.sleep(11)
    assert a.acquire() is False
