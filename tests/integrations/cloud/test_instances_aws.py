"""The AWS instance control against moto's server: GPU instances found (CPU ones filtered out by
EC2's own instance-type data), tags and Auto Scaling membership read, priced from the cost table;
stops and their undo for a standalone instance, an instance in a group (standby, then stop) and a
scale-in; a stop that fails part-way rolled back; an endpoint that is down named as such."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from aws_world import autoscaling, control, desired, ec2, group, image, launch, lifecycle_state, state, tags

from gpusteward.domain.cloud import EXCLUDE_UNTIL_TAG, PROTECT_TAG, Lifecycle
from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.build import restore_instance
from gpusteward.integrations.cloud.instances import STOPPED_HOW_TAG
from gpusteward.integrations.cloud.settings import AwsSettings, CloudSettings
from gpusteward.integrations.sim import SimClock

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def test_gpu_instances_are_found_tagged_and_priced(aws: str, caplog: pytest.LogCaptureFixture) -> None:
    a = launch(aws, "p4d.24xlarge", "gpu-a")
    b = launch(aws, "g5.xlarge", "gpu-b", **{PROTECT_TAG: "true"})
    c = launch(aws, "g5.xlarge", "gpu-c", **{EXCLUDE_UNTIL_TAG: "2026-04-01"})
    launch(aws, "m5.large", "cpu")
    # m5 is asked for, but EC2's data for m5.large lists no GPU: it is left out all the same.
    with caplog.at_level(logging.WARNING):
        found = control(aws, SimClock(T0), families=["p4d", "g5", "m5"]).instances()
    assert sorted(found) == ["gpu-a", "gpu-b", "gpu-c"]
    assert (found["gpu-a"].id, found["gpu-a"].gpus, found["gpu-a"].instance_type) == (a, 8, "p4d.24xlarge")
    # Priced from the cost table: 8 x A100 40 GB at its on-demand price (1.80 USD).
    assert found["gpu-a"].price_per_hour == pytest.approx(8 * 1.80)
    assert found["gpu-b"].price_per_hour == pytest.approx(1.00)  # the A10G key
    assert found["gpu-a"].lifecycle is Lifecycle.ON_DEMAND
    assert (found["gpu-b"].id, found["gpu-b"].protected) == (b, True)
    assert found["gpu-c"].id == c
    assert found["gpu-c"].excluded(T0)
    assert not found["gpu-c"].excluded(datetime(2026, 4, 2, tzinfo=UTC))
    assert f"aws:///us-east-1a/{a}" in found["gpu-a"].aliases  # a Kubernetes node's providerID
    # moto has no describe_reserved_instances: said once, and priced at on-demand meanwhile.
    assert "reserved instances not read" in caplog.text


def test_a_spot_instance_is_priced_at_the_spot_rate(aws: str) -> None:
    got = ec2(aws).run_instances(
        ImageId=image(aws),
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "gpu-s"}]}],
    )
    assert got["Instances"][0]["InstanceLifecycle"] == "spot"
    found = control(aws, SimClock(T0)).instances()["gpu-s"]
    assert found.lifecycle is Lifecycle.SPOT
    assert found.price_per_hour == pytest.approx(1.00 * (1 - 0.60))  # the cost table's spot discount


def test_families_and_instance_tags_narrow_the_search(aws: str) -> None:
    launch(aws, "p4d.24xlarge", "gpu-a", cluster="prod")
    launch(aws, "g5.xlarge", "gpu-b", cluster="dev")
    assert sorted(control(aws, SimClock(T0), families=["g5"]).instances()) == ["gpu-b"]
    assert sorted(control(aws, SimClock(T0), instance_tags={"cluster": "prod"}).instances()) == ["gpu-a"]


def test_a_standalone_instance_is_stopped_recorded_and_started_again(aws: str) -> None:
    a = launch(aws, "p4d.24xlarge", "gpu-a")
    ctl = control(aws, SimClock(T0))
    said = ctl.stop(ctl.instances()["gpu-a"], "idle")
    assert said == f"stopped instance {a} (p4d.24xlarge)"
    assert state(aws, a) == "stopped"
    assert tags(aws, a)[STOPPED_HOW_TAG] == "stop"
    # Restore by node name, as `gpusteward restore node/gpu-a` does, from the tags alone.
    cfg = CloudSettings(provider="aws", aws=AwsSettings(endpoint_url=aws, max_attempts=1))
    assert restore_instance(cfg, "node/gpu-a") == f"started instance {a}"
    assert state(aws, a) == "running"
    assert STOPPED_HOW_TAG not in tags(aws, a)
    with pytest.raises(ExecutionError, match="no instance that gpusteward stopped"):
        restore_instance(cfg, f"node/{a}")  # running, nothing recorded: nothing to undo


def test_a_group_member_goes_to_standby_then_stops_and_comes_back(aws: str) -> None:
    ids = group(aws, "pool", 2)
    autoscaling(aws).set_instance_protection(
        AutoScalingGroupName="pool", InstanceIds=[ids[0]], ProtectedFromScaleIn=True
    )
    ctl = control(aws, SimClock(T0))
    by_id = {i.id: i for i in ctl.instances().values()}
    assert by_id[ids[0]].scale_in_protected
    assert not by_id[ids[1]].scale_in_protected
    with pytest.raises(ExecutionError, match="scale-in protection"):
        ctl.stop(by_id[ids[0]], "idle")
    assert state(aws, ids[0]) == "running"
    assert desired(aws, "pool") == 2
    ctl.stop(by_id[ids[1]], "idle")
    assert (state(aws, ids[1]), lifecycle_state(aws, ids[1]), desired(aws, "pool")) == (
        "stopped",
        "Standby",
        1,
    )
    cfg = CloudSettings(provider="aws", aws=AwsSettings(endpoint_url=aws, max_attempts=1))
    assert "returned it to service in group pool" in restore_instance(cfg, f"node/{ids[1]}")
    assert (state(aws, ids[1]), lifecycle_state(aws, ids[1]), desired(aws, "pool")) == (
        "running",
        "InService",
        2,
    )


def test_scale_in_terminates_only_with_consent_and_restore_raises_the_group(aws: str) -> None:
    with pytest.raises(ValueError, match="allow_terminate"):
        control(aws, SimClock(T0), action="asg-scale-in")
    ids = group(aws, "pool", 2)
    ctl = control(aws, SimClock(T0), action="asg-scale-in", allow_terminate=True)
    inst = next(i for i in ctl.instances().values() if i.id == ids[1])
    assert "terminated, desired capacity lowered by one" in ctl.stop(inst, "idle")
    assert state(aws, ids[1]) == "terminated"
    assert desired(aws, "pool") == 1
    cfg = CloudSettings(provider="aws", aws=AwsSettings(endpoint_url=aws, max_attempts=1))
    assert "desired capacity 1 → 2" in restore_instance(cfg, f"node/{ids[1]}")
    assert desired(aws, "pool") == 2


class RefusesStop(AwsClient):
    """The real client against moto, except that AWS refuses ``stop_instances`` (fault injection)."""

    def change(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        if operation == "stop_instances":
            raise ExecutionError("aws ec2 stop_instances failed: UnauthorizedOperation: injected")
        return super().change(service, operation, **params)


def test_a_stop_that_fails_part_way_is_rolled_back(aws: str) -> None:
    ids = group(aws, "pool", 2)
    client = RefusesStop(AwsSettings(endpoint_url=aws, max_attempts=1))
    ctl = control(aws, SimClock(T0), client=client)
    inst = next(i for i in ctl.instances().values() if i.id == ids[1])
    with pytest.raises(ExecutionError, match="UnauthorizedOperation"):
        ctl.stop(inst, "idle")
    # Out of standby again, the desired capacity back, no record left: as it was found.
    assert (state(aws, ids[1]), lifecycle_state(aws, ids[1]), desired(aws, "pool")) == (
        "running",
        "InService",
        2,
    )
    assert STOPPED_HOW_TAG not in tags(aws, ids[1])


def test_an_endpoint_that_is_down_reads_as_a_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = AwsClient(
        AwsSettings(endpoint_url="http://127.0.0.1:9", max_attempts=2, connect_timeout_seconds=0.5)
    )
    ctl = control("http://127.0.0.1:9", SimClock(T0), client=client)
    with pytest.raises(SourceError, match="aws ec2 describe_instances failed: EndpointConnectionError"):
        ctl.instances()
    cfg = CloudSettings(provider="aws", aws=AwsSettings(endpoint_url="http://127.0.0.1:9", max_attempts=1))
    with pytest.raises(ExecutionError, match="cannot read it, nothing done"):
        restore_instance(cfg, "node/gpu-a")


def test_one_read_serves_a_tick_and_the_next_tick_reads_again(aws: str) -> None:
    """The instance step and the showback recorder both read each tick: one describe_instances."""
    launch(aws, "g5.xlarge", "gpu-a")
    clock = SimClock(T0)
    ctl = control(aws, clock)
    calls: list[str] = []
    read, pages = ctl.client.read, ctl.client.pages

    def counting(service: str, operation: str, **params: Any) -> dict[str, Any]:
        calls.append(operation)
        return read(service, operation, **params)

    def counting_pages(service: str, operation: str, **params: Any) -> Iterator[dict[str, Any]]:
        calls.append(operation)
        return pages(service, operation, **params)

    ctl.client.read = counting  # type: ignore[method-assign]
    ctl.client.pages = counting_pages  # type: ignore[method-assign]
    first = ctl.instances()
    assert ctl.instances() == first
    reads = calls.count("describe_instances")
    assert reads == 1
    launch(aws, "g5.xlarge", "gpu-b")
    clock.advance(30)  # the next tick sees what changed
    assert sorted(ctl.instances()) == ["gpu-a", "gpu-b"]
    assert calls.count("describe_instances") == reads + 1
