"""``cloud:`` → the cloud's parts of the loop: the one AWS client and the instances behind the
nodes (L4 stops); and ``gpusteward restore node/<id>`` for the instances, from what a stop
recorded on the instance or its group."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.cloud import InstanceControl, InterruptionWatch
from gpusteward.domain.errors import ConfigError, ExecutionError, SourceError
from gpusteward.domain.integration import BuildContext
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.instances import AwsInstanceControl
from gpusteward.integrations.cloud.settings import CloudSettings


@dataclass(frozen=True)
class CloudParts:
    """What ``cloud:`` adds to the configured integration (``Integration.instances`` and
    ``Integration.interruptions``)."""

    client: AwsClient | None = None
    instances: InstanceControl | None = None
    interruptions: InterruptionWatch | None = None


def build(
    cfg: CloudSettings,
    ctx: BuildContext,
    *,
    prices: PriceTable | None = None,
    node_ids: Callable[[], Mapping[str, str]] | None = None,
) -> CloudParts:
    """The AWS client and instance control when ``cloud.provider`` is aws; nothing is called yet.
    ``node_ids`` (the cluster's providerID by node name) joins instances to nodes exactly."""
    if cfg.provider != "aws":
        if cfg.instances.enabled:
            raise ConfigError(
                f"cloud.instances: stopping instances needs cloud.provider aws, not {cfg.provider}"
            )
        return CloudParts()
    client = AwsClient(cfg.aws)
    control = AwsInstanceControl(client, cfg.instances, prices or PriceTable(), ctx.clock, node_ids=node_ids)
    return CloudParts(client=client, instances=control)


def restore_instance(cfg: CloudSettings, target: str) -> str:
    """Undo gpusteward's stop of ``node/<instance-id or node name>``: start the instance (and
    return it to service in its group) or raise its group's desired capacity back."""
    name = target.removeprefix("node/")
    if not name or name == target:
        raise ExecutionError(f"{target!r}: name an instance as node/<instance-id> or node/<node name>")
    if cfg.provider != "aws":
        raise ExecutionError(f"restore {target}: cloud.provider is {cfg.provider}, not aws")
    control = AwsInstanceControl(AwsClient(cfg.aws), cfg.instances, PriceTable(), SystemClock())
    try:
        found = control.recorded(name)
    except SourceError as e:
        raise ExecutionError(f"restore {target}: cannot read it, nothing done: {e}") from e
    if found is None:
        raise ExecutionError(f"{target}: no instance that gpusteward stopped or scaled in")
    instance_id, record = found
    return control.start(instance_id, record)
