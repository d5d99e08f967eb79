"""The one AWS client against moto's server: reads and changes go through, failures become one
clear line in gpusteward's error tree, and an endpoint that is down is named as such."""

from __future__ import annotations

import pytest

from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.settings import AwsSettings


def test_reads_and_changes_through_moto(aws: str) -> None:
    client = AwsClient(AwsSettings(endpoint_url=aws))
    assert client.read("ec2", "describe_instances")["Reservations"] == []
    client.change("sqs", "create_queue", QueueName="spot")
    urls = client.read("sqs", "list_queues")["QueueUrls"]
    assert [u.rsplit("/", 1)[-1] for u in urls] == ["spot"]


def test_a_refused_change_is_an_execution_error_with_the_code(aws: str) -> None:
    client = AwsClient(AwsSettings(endpoint_url=aws))
    with pytest.raises(ExecutionError, match=r"aws ec2 stop_instances failed: InvalidInstanceID"):
        client.change("ec2", "stop_instances", InstanceIds=["i-0123456789abcdef0"])


def test_an_endpoint_that_is_down_is_a_source_error_after_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    cfg = AwsSettings(endpoint_url="http://127.0.0.1:9", max_attempts=2, connect_timeout_seconds=0.5)
    with pytest.raises(SourceError, match=r"aws ec2 describe_instances failed: EndpointConnectionError"):
        AwsClient(cfg).read("ec2", "describe_instances")
