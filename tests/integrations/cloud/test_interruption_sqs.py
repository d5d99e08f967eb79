"""The SQS watch against moto's server: EventBridge-shaped EC2 events in a real queue, read and
deleted through the AWS client (boto3 over HTTP)."""

from __future__ import annotations

import json
import logging
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpusteward.domain.cloud import NoticeKind
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.interruption.build import build_watch
from gpusteward.integrations.cloud.interruption.sqs import REBALANCE, SPOT_WARNING, SqsWatch
from gpusteward.integrations.cloud.settings import AwsSettings, CloudSettings
from gpusteward.integrations.sim import SimClock

NOW = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)


def event(detail_type: str, instance: str, *, time: str = "2026-12-01T18:59:30Z", **detail: str) -> str:
    """An EventBridge event as AWS documents it for EC2 spot interruption warnings."""
    return json.dumps(
        {
            "version": "0",
            "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
            "detail-type": detail_type,
            "source": "aws.ec2",
            "account": "123456789012",
            "time": time,
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1a:instance/{instance}"],
            "detail": {"instance-id": instance, **detail},
        }
    )


def _queue(aws: str) -> tuple[AwsClient, str]:
    client = AwsClient(AwsSettings(endpoint_url=aws, max_attempts=1))
    url = client.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]
    return client, str(url)


def _send(client: AwsClient, url: str, *bodies: str) -> None:
    for body in bodies:
        client.client("sqs").send_message(QueueUrl=url, MessageBody=body)


def _left(client: AwsClient, url: str) -> int:
    attrs: dict[str, Any] = client.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_spot_warning_becomes_a_notice_on_its_node_and_is_deleted(aws: str) -> None:
    client, url = _queue(aws)
    _send(
        client,
        url,
        event(SPOT_WARNING, "i-0aaa", **{"instance-action": "terminate"}),
        event(REBALANCE, "i-0bbb"),
        event("EC2 Instance State-change Notification", "i-0ccc", state="running"),
    )
    clock = SimClock(NOW)
    watch = SqsWatch(client, url, clock, node_of={"i-0aaa": "gpu-7"}.get)  # type: ignore[arg-type]
    notices = sorted(watch.poll(clock.now()), key=lambda n: n.kind.value)
    assert [(n.kind, n.instance_id) for n in notices] == [
        (NoticeKind.INTERRUPTION, "i-0aaa"),
        (NoticeKind.REBALANCE, "i-0bbb"),
    ]
    spot = notices[0]
    assert spot.node == "gpu-7"
    assert spot.via == "sqs"
    assert spot.provider == "aws"
    assert spot.deadline == datetime(2026, 12, 1, 18, 59, 30, tzinfo=UTC) + timedelta(minutes=2)
    assert _left(client, url) == 0  # all three read and deleted, the unrelated one too
    clock.advance(10)
    assert watch.poll(clock.now()) == []


def test_a_burst_larger_than_one_receive_is_read_in_one_poll(aws: str) -> None:
    client, url = _queue(aws)
    _send(
        client,
        url,
        *(event(SPOT_WARNING, f"i-{k:04d}", **{"instance-action": "terminate"}) for k in range(23)),
    )
    clock = SimClock(NOW)
    notices = SqsWatch(client, url, clock).poll(clock.now())
    assert sorted(n.instance_id for n in notices) == [f"i-{k:04d}" for k in range(23)]
    assert {n.node for n in notices} == {n.instance_id for n in notices}  # no instance map: the id


def test_malformed_message_is_logged_and_dropped(aws: str, caplog: pytest.LogCaptureFixture) -> None:
    client, url = _queue(aws)
    _send(client, url, "not json", json.dumps({"detail-type": SPOT_WARNING, "detail": {}}))
    clock = SimClock(NOW)
    with caplog.at_level(logging.WARNING):
        assert SqsWatch(client, url, clock).poll(clock.now()) == []
    assert caplog.text.count("dropped") == 2
    assert "without detail.instance-id" in caplog.text
    assert _left(client, url) == 0


def test_sqs_down_is_one_clear_line_and_no_notice(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    client = AwsClient(AwsSettings(endpoint_url=dead, max_attempts=1, connect_timeout_seconds=1))
    clock = SimClock(NOW)
    watch = SqsWatch(client, f"{dead}/123456789012/spot-events", clock, poll_s=2)
    with caplog.at_level(logging.WARNING):
        assert watch.poll(clock.now()) == []
    assert "aws sqs receive_message failed" in caplog.text
    assert "next try in 4 s" in caplog.text


def test_build_watch_adds_the_queue_for_aws(aws: str) -> None:
    client, url = _queue(aws)
    cfg = CloudSettings.model_validate(
        {"provider": "aws", "aws": {"endpoint_url": aws}, "interruption": {"sqs_queue_url": url}}
    )
    clock = SimClock(NOW)
    watch = build_watch(cfg, clock, node=None)  # a cluster-wide agent: the queue only
    assert watch is not None
    _send(client, url, event(SPOT_WARNING, "i-0aaa", **{"instance-action": "terminate"}))
    [notice] = watch.poll(clock.now())
    assert notice.instance_id == "i-0aaa"
