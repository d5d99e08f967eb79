"""Settings of the cloud integration (``cloud:`` in the config): the AWS client, the GPU instances
gpusteward may stop or scale in, and the interruption notices it watches."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpusteward.integrations.cloud.interruption.settings import InterruptionSettings
from gpusteward.policy.instance_settings import InstanceSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class AwsSettings(_Section):
    """How gpusteward reaches AWS. Credentials come from boto3's usual chain (environment,
    shared files, the instance profile, IRSA); nothing secret is kept here."""

    region: str = Field("us-east-1", description="AWS region of the GPU instances and the SQS queue.")
    endpoint_url: str = Field(
        "",
        description="Send every AWS call here instead of AWS's own endpoints (a VPC endpoint, or moto's "
        "server in tests); empty: AWS's.",
    )
    max_attempts: int = Field(
        5,
        ge=1,
        le=20,
        description="Attempts per AWS call, the first included (botocore's standard retry mode, with "
        "backoff and jitter; throttling is retried too).",
    )
    connect_timeout_seconds: float = Field(5.0, gt=0, le=120, description="Connect timeout per AWS call.")
    read_timeout_seconds: float = Field(20.0, gt=0, le=600, description="Read timeout per AWS call.")


class CloudSettings(_Section):
    """The cloud under the cluster's nodes. Off by default: nothing calls a cloud API unless
    ``provider`` names one."""

    provider: Literal["none", "aws", "gcp", "azure"] = Field(
        "none",
        description="Where the nodes run: aws (instances, Auto Scaling groups, spot notices), gcp or "
        "azure (preemption notices from the metadata service only); none: no cloud calls at all.",
    )
    aws: AwsSettings = Field(default_factory=AwsSettings)
    instances: InstanceSettings = Field(
        default_factory=InstanceSettings,
        description="L4 stops of idle GPU nodes' instances (aws only).",
    )
    interruption: InterruptionSettings = Field(default_factory=InterruptionSettings)
