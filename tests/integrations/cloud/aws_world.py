"""Building a small AWS account in moto's server for the instance tests: GPU and CPU instances
with tags, and an Auto Scaling group of GPU instances from a launch template."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import boto3

from gpusteward.analysis.cost import PriceTable
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.instances import AwsInstanceControl
from gpusteward.integrations.cloud.settings import AwsSettings
from gpusteward.integrations.sim import SimClock
from gpusteward.policy.instance_settings import InstanceSettings

REGION = "us-east-1"


def ec2(endpoint: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)


def autoscaling(endpoint: str) -> Any:
    return boto3.client("autoscaling", region_name=REGION, endpoint_url=endpoint)


_IMAGES: dict[str, str] = {}


def image(endpoint: str) -> str:
    """One of moto's stock AMIs (the same after every reset; listing them is slow)."""
    if endpoint not in _IMAGES:
        got = ec2(endpoint).describe_images(Owners=["amazon"], MaxResults=5)["Images"]
        _IMAGES[endpoint] = str(got[0]["ImageId"])
    return _IMAGES[endpoint]


def launch(endpoint: str, instance_type: str, name: str, **tags: str) -> str:
    """One on-demand instance named ``name`` (its Name tag), running."""
    all_tags = [{"Key": "Name", "Value": name}, *({"Key": k, "Value": v} for k, v in tags.items())]
    got = ec2(endpoint).run_instances(
        ImageId=image(endpoint),
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        Placement={"AvailabilityZone": f"{REGION}a"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": all_tags}],
    )
    return str(got["Instances"][0]["InstanceId"])


def group(endpoint: str, name: str, size: int, instance_type: str = "g5.xlarge") -> list[str]:
    """An Auto Scaling group of ``size`` instances from a launch template; their ids."""
    ec2(endpoint).create_launch_template(
        LaunchTemplateName=f"{name}-lt",
        LaunchTemplateData={"ImageId": image(endpoint), "InstanceType": instance_type},
    )
    asg = autoscaling(endpoint)
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": f"{name}-lt", "Version": "$Latest"},
        MinSize=0,
        MaxSize=size + 2,
        DesiredCapacity=size,
        AvailabilityZones=[f"{REGION}a"],
    )
    got = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return sorted(str(i["InstanceId"]) for i in got["Instances"])


def state(endpoint: str, instance_id: str) -> str:
    got = ec2(endpoint).describe_instances(InstanceIds=[instance_id])
    return str(got["Reservations"][0]["Instances"][0]["State"]["Name"])


def tags(endpoint: str, instance_id: str) -> dict[str, str]:
    got = ec2(endpoint).describe_instances(InstanceIds=[instance_id])
    return {t["Key"]: t["Value"] for t in got["Reservations"][0]["Instances"][0].get("Tags", [])}


def desired(endpoint: str, name: str) -> int:
    got = autoscaling(endpoint).describe_auto_scaling_groups(AutoScalingGroupNames=[name])
    return int(got["AutoScalingGroups"][0]["DesiredCapacity"])


def lifecycle_state(endpoint: str, instance_id: str) -> str:
    got = autoscaling(endpoint).describe_auto_scaling_instances(InstanceIds=[instance_id])
    return str(got["AutoScalingInstances"][0]["LifecycleState"])


def provider_id(instance_id: str) -> str:
    """The ``spec.providerID`` EKS gives the node on this instance (``launch`` places it in zone a)."""
    return f"aws:///{REGION}a/{instance_id}"


def control(
    endpoint: str,
    clock: SimClock,
    client: AwsClient | None = None,
    *,
    node_ids: Callable[[], Mapping[str, str]] | None = None,
    **settings: Any,
) -> AwsInstanceControl:
    cfg = InstanceSettings(**settings)
    client = client or AwsClient(AwsSettings(endpoint_url=endpoint, max_attempts=2))
    return AwsInstanceControl(
        client, cfg, PriceTable(), clock, sleep=lambda s: None, poll_seconds=0.0, node_ids=node_ids
    )
