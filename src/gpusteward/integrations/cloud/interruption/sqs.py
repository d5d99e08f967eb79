"""Cluster-wide interruption notices from an SQS queue that an EventBridge rule feeds with EC2's
events. Each message body is the event as EventBridge sends it::

    {"version": "0", "id": "...", "detail-type": "EC2 Spot Instance Interruption Warning",
     "source": "aws.ec2", "account": "...", "time": "2026-12-01T19:00:00Z", "region": "us-east-1",
     "resources": ["arn:aws:ec2:us-east-1a:instance/i-0abc"],
     "detail": {"instance-id": "i-0abc", "instance-action": "terminate"}}

(``EC2 Instance Rebalance Recommendation`` carries ``detail.instance-id`` only). The instance is
taken two minutes after ``time``. A message is deleted once read: a notice is acted on in the
same tick, and one that cannot be parsed is logged and dropped, never retried forever.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from gpusteward.domain.cloud import InterruptionNotice, NoticeKind
from gpusteward.domain.errors import ExecutionError, SourceError, SourceUnavailable
from gpusteward.domain.ports import Clock
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.interruption.metadata import parse_time
from gpusteward.integrations.cloud.interruption.polling import PollingWatch, WatchFailed

log = logging.getLogger(__name__)

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
WARNING_S = 120.0


def parse_event(body: str, node_of: Callable[[str], str], now: datetime) -> InterruptionNotice | None:
    """One EventBridge event → a notice; None for another kind of event. ``ValueError`` when the
    body is not such an event at all."""
    event: Any = json.loads(body)
    if not isinstance(event, dict) or not isinstance(event.get("detail"), dict):
        raise ValueError("not an EventBridge event (no detail object)")
    kind = {SPOT_WARNING: NoticeKind.INTERRUPTION, REBALANCE: NoticeKind.REBALANCE}.get(
        str(event.get("detail-type", ""))
    )
    if kind is None:
        return None
    instance = str(event["detail"].get("instance-id") or "")
    if not instance:
        raise ValueError(f"{event.get('detail-type')} without detail.instance-id")
    sent = parse_time(str(event["time"])) if event.get("time") else now
    deadline = sent + timedelta(seconds=WARNING_S) if kind is NoticeKind.INTERRUPTION else None
    return InterruptionNotice(
        node=node_of(instance),
        instance_id=instance,
        provider="aws",
        kind=kind,
        deadline=deadline,
        seen_at=now,
        via="sqs",
        raw=body[:500],
    )


class SqsWatch(PollingWatch):
    """Reads (and deletes) up to ``batch`` messages per poll, without waiting for more."""

    via = "sqs"

    def __init__(
        self,
        aws: AwsClient,
        queue_url: str,
        clock: Clock,
        *,
        node_of: Callable[[str], str] = lambda instance_id: instance_id,
        poll_s: float = 5.0,
        backoff_max_s: float = 60.0,
        batch: int = 10,
        max_batches: int = 10,
    ) -> None:
        super().__init__(clock, poll_s=poll_s, backoff_max_s=backoff_max_s)
        self.aws = aws
        self.queue_url = queue_url
        self.node_of = node_of
        self.batch = batch
        self.max_batches = max_batches

    def read(self, now: datetime) -> list[InterruptionNotice]:
        out: list[InterruptionNotice] = []
        for _ in range(self.max_batches):  # a burst (a whole zone reclaimed) is read in one tick
            messages = self._receive()
            for m in messages:
                try:
                    notice = parse_event(str(m.get("Body", "")), self.node_of, now)
                except (ValueError, KeyError, TypeError) as e:
                    log.warning("sqs message %s dropped: %s", m.get("MessageId", "?"), e)
                    notice = None
                if notice is not None:
                    out.append(notice)
                self._delete(m)
            if len(messages) < self.batch:
                break
        return out

    def _receive(self) -> list[dict[str, Any]]:
        try:
            reply = self.aws.read(
                "sqs",
                "receive_message",
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=self.batch,
                WaitTimeSeconds=0,
            )
        except (SourceError, SourceUnavailable) as e:
            raise WatchFailed(str(e)) from e
        messages: list[dict[str, Any]] = reply.get("Messages", [])
        return messages

    def _delete(self, message: dict[str, Any]) -> None:
        try:
            self.aws.change(
                "sqs", "delete_message", QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
        except ExecutionError as e:
            # It comes back after its visibility timeout; its notice key makes it a repeat.
            log.warning("sqs message %s not deleted: %s", message.get("MessageId", "?"), e)
