"""The registry and the steward wire ``cloud.instances``: the AWS control on the configured
integration when ``cloud.provider`` is aws (built without calling AWS), the step and its executor
in the steward when enabled, and a clear error when it is enabled with nothing to stop."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import Integration
from gpusteward.integrations.cloud.instances import AwsInstanceControl
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.instance_executor import InstanceExecutor
from gpusteward.runtime.registry import build_integration
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 3, 2, tzinfo=UTC)
CLOUD = {"provider": "aws", "aws": {"endpoint_url": "http://127.0.0.1:9"}, "instances": {"enabled": True}}


def test_the_registry_attaches_the_aws_instances_and_the_steward_stops_through_them() -> None:
    settings = load_settings(
        None,
        mode="enforce",
        source={"name": "prometheus", "prometheus": {"url": "http://127.0.0.1:9"}},
        cloud=CLOUD,
    )
    integration = build_integration(settings, SimClock(T0))
    assert isinstance(integration.instances, AwsInstanceControl)
    steward, _ = build_steward(
        settings, clock=SimClock(T0), store=MemoryStore(), integration=integration, backfill=False
    )
    assert steward.instances is not None
    assert any(isinstance(e, InstanceExecutor) for e in steward.runner.executors)


def test_enabled_without_a_cloud_is_a_config_error() -> None:
    settings = load_settings(None, cloud={"instances": {"enabled": True}})
    bare = Integration(name="fake", source=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"cloud.instances.enabled: no cloud instances to stop"):
        build_steward(settings, clock=SimClock(T0), store=MemoryStore(), integration=bare, backfill=False)
