"""``cloud:`` → the interruption watch: this node's metadata service (the node agent) and the
cluster's SQS queue (AWS), as one ``InterruptionWatch``; None when nothing is to be watched."""

from __future__ import annotations

import logging
import socket

from gpusteward.domain.cloud import InstanceControl, InterruptionWatch
from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.ports import Clock
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.interruption.metadata import WATCHES
from gpusteward.integrations.cloud.interruption.polling import PollingWatch, Watches
from gpusteward.integrations.cloud.interruption.sqs import SqsWatch
from gpusteward.integrations.cloud.settings import CloudSettings

log = logging.getLogger(__name__)


def build_watch(
    cfg: CloudSettings,
    clock: Clock,
    *,
    node: str | None = None,
    instances: InstanceControl | None = None,
    aws: AwsClient | None = None,
) -> InterruptionWatch | None:
    """The watch ``cfg`` asks for. ``node`` is set on a node agent (its node's name; empty: this
    host's name): only there is this host's metadata service asked. A queue's notices name their
    instance; ``instances`` (the cloud's instances behind the nodes) turns that into the node."""
    s = cfg.interruption
    if cfg.provider == "none" or not s.enabled:
        return None
    watches: list[PollingWatch] = []
    if s.watch_metadata and node is not None:
        kind, default_url = WATCHES[cfg.provider]
        watches.append(
            kind(
                s.metadata_url or default_url,
                node or socket.gethostname(),
                clock,
                poll_s=s.poll_seconds,
                timeout_s=s.timeout_seconds,
                backoff_max_s=s.backoff_max_seconds,
                warning_s=s.warning_seconds,
            )
        )
    if s.sqs_queue_url and cfg.provider == "aws":
        watches.append(
            SqsWatch(
                aws or AwsClient(cfg.aws),
                s.sqs_queue_url,
                clock,
                node_of=NodeOfInstance(instances),
                poll_s=s.poll_seconds,
                backoff_max_s=s.backoff_max_seconds,
            )
        )
    return Watches(*watches) if watches else None


class NodeOfInstance:
    """Instance id → the node it backs (read from the cloud when an id is not known yet); the id
    itself where no instance control is configured or the instance is not a known node's."""

    def __init__(self, instances: InstanceControl | None) -> None:
        self.instances = instances
        self._known: dict[str, str] = {}

    def __call__(self, instance_id: str) -> str:
        if instance_id not in self._known and self.instances is not None:
            try:
                self._known = {i.id: node for node, i in self.instances.instances().items()}
            except (SourceError, ExecutionError) as e:
                log.warning("node of instance %s unknown (instances unreadable: %s)", instance_id, e)
        return self._known.get(instance_id, instance_id)
