"""AWS's GPU instances behind the cluster's nodes (``InstanceControl``): found through EC2 and Auto
Scaling, stopped and started again, every call through the one ``AwsClient``.

How a stop is done, and why:

* a standalone instance is stopped (``stop_instances``): its EBS volumes stay, a start brings it back;
* an instance in an Auto Scaling group is never stopped in place (the group would see an unhealthy
  instance and launch a replacement). With ``action: stop`` it is first put in standby with the
  desired capacity lowered by one (``enter_standby``; the group launches nothing and no longer
  health-checks it), then stopped; restore starts it and returns it to service
  (``exit_standby`` raises the desired capacity back). Nothing is terminated.
* with ``action: asg-scale-in`` (and ``allow_terminate``) it is terminated through its group with
  the desired capacity lowered (``terminate_instance_in_auto_scaling_group``), never one with
  scale-in protection; restore raises the desired capacity back and the group launches a new one.

What a stop did is written on the instance (tags ``gpusteward.io/stopped-*``) or, for a scale-in,
on its group (``gpusteward.io/scaled-in/<instance-id>``), before the change; restore reads it
back from there, so it needs nothing but AWS. A change that fails part-way is rolled back to what
was found (standby left, tags removed) and raises ``ExecutionError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.cloud import Instance
from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.ports import Clock
from gpusteward.integrations.cloud.aws import AwsClient, error_code
from gpusteward.integrations.cloud.discovery import (
    RECORD_TAGS,
    STOPPED_AT_TAG,
    STOPPED_GROUP_TAG,
    STOPPED_HOW_TAG,
    InstanceFinder,
)
from gpusteward.integrations.cloud.join import by_node
from gpusteward.policy.instance_settings import InstanceSettings
from gpusteward.policy.instances import match_nodes

log = logging.getLogger(__name__)

#: A scale-in's record, on the group (the instance is gone): value ``node=..;at=..``.
SCALED_IN_TAG = "gpusteward.io/scaled-in/"
#: States of an instance that may come back; terminated ones are left out of discovery.
_LIVE = ["pending", "running", "stopping", "stopped"]
_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})


#: A whole read of the instances is reused this long (within one tick); pre-flight and verify
#: always read the one instance afresh (``instance``).
REUSE_READ_S = 5.0


class AwsInstanceControl:
    """``InstanceControl`` for EC2 instances and Auto Scaling groups."""

    name = "aws"

    def __init__(
        self,
        client: AwsClient,
        settings: InstanceSettings,
        prices: PriceTable,
        clock: Clock,
        *,
        sleep: Callable[[float], None] = time.sleep,
        poll_seconds: float = 5.0,
        node_ids: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.prices = prices
        self.clock = clock
        self.sleep = sleep
        self.poll_seconds = poll_seconds
        self.finder = InstanceFinder(client, settings, prices, clock.monotonic)
        #: The cluster's providerID by node name (``Integration.node_ids``): the exact join first.
        self.node_ids = node_ids
        #: The last whole read and when (monotonic s): the instance step and the showback recorder
        #: both read every tick, and one describe_instances serves both.
        self._last: tuple[float, dict[str, Instance]] | None = None

    # -- reads ----------------------------------------------------------------------------------
    def instances(self) -> dict[str, Instance]:
        now = self.clock.monotonic()
        if self._last is not None and now - self._last[0] < REUSE_READ_S:
            return dict(self._last[1])
        found = self._read_instances()
        self._last = (now, found)
        return dict(found)

    def _read_instances(self) -> dict[str, Instance]:
        filters = [{"Name": "instance-state-name", "Values": _LIVE}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in self.settings.instance_tags.items()]
        # Families are matched here, not by a wildcard filter: the instance type's data decides
        # what has GPUs either way, and this reads the same from every EC2 endpoint.
        families = set(self.settings.families)
        found = self.finder.describe(Filters=filters, keep=lambda t: t.split(".", 1)[0] in families)
        return by_node(found, self.node_ids() if self.node_ids is not None else {})

    def instance(self, instance_id: str) -> Instance | None:
        try:
            found = self.finder.describe(InstanceIds=[instance_id])
        except SourceError as e:
            cause = e.__cause__
            if isinstance(cause, Exception) and error_code(cause) in _NOT_FOUND:
                return None
            raise
        return found[0] if found else None

    def group_state(self, group: str, instance_id: str) -> str:
        """The instance's lifecycle state in its group (InService, Standby, ...), "" if not in it."""
        got = self.client.read("autoscaling", "describe_auto_scaling_instances", InstanceIds=[instance_id])
        for m in got.get("AutoScalingInstances", []):
            if m.get("AutoScalingGroupName") == group:
                return str(m.get("LifecycleState", ""))
        return ""

    def scaled_in(self, key: str) -> tuple[str, str, dict[str, str]] | None:
        """A scale-in's record for an instance id or node name: (group, instance id, record)."""
        for page in self.client.pages("autoscaling", "describe_auto_scaling_groups"):
            for g in page.get("AutoScalingGroups", []):
                for t in g.get("Tags", []):
                    k = str(t["Key"])
                    if not k.startswith(SCALED_IN_TAG):
                        continue
                    iid = k[len(SCALED_IN_TAG) :]
                    rec = dict(p.split("=", 1) for p in str(t.get("Value", "")).split(";") if "=" in p)
                    if key in (iid, rec.get("node")):
                        return str(g["AutoScalingGroupName"]), iid, rec
        return None

    def recorded(self, key: str) -> tuple[str, dict[str, str]] | None:
        """What a stop recorded for an instance id or a node name: (instance id, record), or None
        when gpusteward stopped nothing there."""
        by_id = key.startswith("i-")
        found = self.instance(key) if by_id else match_nodes(self.instances(), [key]).get(key)
        if found is not None and found.recorded:
            return found.id, dict(found.recorded)
        hit = self.scaled_in(found.id if found is not None else key)
        if hit is None:
            return None
        group, iid, _ = hit
        return iid, {STOPPED_HOW_TAG: "scale-in", STOPPED_GROUP_TAG: group}

    # -- changes --------------------------------------------------------------------------------
    def stop(self, instance: Instance, reason: str) -> str:
        if instance.excluded(self.clock.now()):
            raise ExecutionError(f"instance {instance.id} is protected or excluded: not stopped")
        if not instance.group:
            return self._stop_alone(instance)
        if instance.scale_in_protected:
            raise ExecutionError(
                f"instance {instance.id} has scale-in protection in group {instance.group}: not taken out"
            )
        if self.settings.action == "asg-scale-in":
            return self._scale_in(instance)
        return self._standby_and_stop(instance)

    def _record(self, instance: Instance, how: str) -> None:
        tags = {STOPPED_AT_TAG: self.clock.now().isoformat(timespec="seconds"), STOPPED_HOW_TAG: how}
        if instance.group:
            tags[STOPPED_GROUP_TAG] = instance.group
        self.client.change(
            "ec2",
            "create_tags",
            Resources=[instance.id],
            Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
        )

    def _forget(self, instance_id: str) -> None:
        self.client.change(
            "ec2", "delete_tags", Resources=[instance_id], Tags=[{"Key": k} for k in RECORD_TAGS]
        )

    def _undo(self, what: str, undo: Callable[[], object]) -> None:
        try:
            undo()
        except ExecutionError as e:  # the error being raised says what failed; this says what is left
            log.error("could not roll back after a failed stop (%s): %s", what, e)

    def _stop_alone(self, instance: Instance) -> str:
        self._record(instance, "stop")
        try:
            self.client.change("ec2", "stop_instances", InstanceIds=[instance.id])
        except ExecutionError:
            self._undo("record tags", lambda: self._forget(instance.id))
            raise
        return f"stopped instance {instance.id} ({instance.instance_type})"

    def _standby_and_stop(self, instance: Instance) -> str:
        g = instance.group
        self._record(instance, "standby")
        try:
            self.client.change(
                "autoscaling",
                "enter_standby",
                AutoScalingGroupName=g,
                InstanceIds=[instance.id],
                ShouldDecrementDesiredCapacity=True,
            )
        except ExecutionError:
            self._undo("record tags", lambda: self._forget(instance.id))
            raise
        try:
            self.client.change("ec2", "stop_instances", InstanceIds=[instance.id])
        except ExecutionError:
            self._undo("standby", lambda: self._exit_standby(g, instance.id))
            self._undo("record tags", lambda: self._forget(instance.id))
            raise
        return (
            f"put instance {instance.id} ({instance.instance_type}) in standby in group {g} "
            "(desired capacity lowered by one) and stopped it"
        )

    def _exit_standby(self, group: str, instance_id: str) -> None:
        self.client.change(
            "autoscaling", "exit_standby", AutoScalingGroupName=group, InstanceIds=[instance_id]
        )

    def _scale_in(self, instance: Instance) -> str:
        if (
            not self.settings.allow_terminate
        ):  # the settings refuse it too; a second lock on the one terminate
            raise ExecutionError("cloud.instances.allow_terminate is off: no instance is terminated")
        g = instance.group
        key = f"{SCALED_IN_TAG}{instance.id}"
        at = self.clock.now().isoformat(timespec="seconds")
        value = f"node={instance.node};at={at};type={instance.instance_type}"
        tag = {"ResourceId": g, "ResourceType": "auto-scaling-group", "Key": key, "PropagateAtLaunch": False}
        self.client.change("autoscaling", "create_or_update_tags", Tags=[{**tag, "Value": value}])
        try:
            self.client.change(
                "autoscaling",
                "terminate_instance_in_auto_scaling_group",
                InstanceId=instance.id,
                ShouldDecrementDesiredCapacity=True,
            )
        except ExecutionError:
            self._undo("group record", lambda: self.client.change("autoscaling", "delete_tags", Tags=[tag]))
            raise
        return f"scaled group {g} in by instance {instance.id} (terminated, desired capacity lowered by one)"

    def start(self, instance_id: str, record: Mapping[str, str]) -> str:
        how = record.get(STOPPED_HOW_TAG, "")
        if how == "scale-in":
            return self._scale_out(record[STOPPED_GROUP_TAG], instance_id)
        if how not in ("stop", "standby"):
            raise ExecutionError(f"instance {instance_id} was not stopped by gpusteward: left alone")
        self.client.change("ec2", "start_instances", InstanceIds=[instance_id])
        said = f"started instance {instance_id}"
        if how == "standby":
            group = record[STOPPED_GROUP_TAG]
            self._wait(instance_id, "running", 300.0)
            if self.group_state(group, instance_id) == "Standby":
                self._exit_standby(group, instance_id)
            said += f" and returned it to service in group {group} (desired capacity raised by one)"
        self._forget(instance_id)
        return said

    def _scale_out(self, group: str, instance_id: str) -> str:
        got = self.client.read("autoscaling", "describe_auto_scaling_groups", AutoScalingGroupNames=[group])
        found = got.get("AutoScalingGroups", [])
        if not found:
            raise ExecutionError(f"Auto Scaling group {group} is gone: nothing to raise")
        desired, most = int(found[0]["DesiredCapacity"]), int(found[0]["MaxSize"])
        if desired + 1 > most:
            raise ExecutionError(f"group {group} is at its maximum size {most}: desired capacity not raised")
        self.client.change(
            "autoscaling", "set_desired_capacity", AutoScalingGroupName=group, DesiredCapacity=desired + 1
        )
        tag = {
            "ResourceId": group,
            "ResourceType": "auto-scaling-group",
            "Key": f"{SCALED_IN_TAG}{instance_id}",
        }
        self.client.change("autoscaling", "delete_tags", Tags=[tag])
        return f"raised group {group}'s desired capacity {desired} → {desired + 1} (for {instance_id})"

    def _wait(self, instance_id: str, state: str, limit_s: float) -> bool:
        """Polls until the instance is in ``state``; False when ``limit_s`` passed first."""
        waited = 0.0
        while True:
            now = self.instance(instance_id)
            if now is not None and now.state == state:
                return True
            if waited >= limit_s:
                return False
            self.sleep(self.poll_seconds)
            waited += self.poll_seconds

    def wait_stopped(self, instance_id: str) -> bool:
        return self._wait(instance_id, "stopped", self.settings.stop_wait_seconds)
