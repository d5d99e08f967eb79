"""The instance executor's pre-flight against moto's server: what changed between the plan and
the act (a protect tag, someone else's stop, a replaced instance, an endpoint gone) leaves the
instance alone; a stop already done is not done twice; a scale-in counts as done once the
instance shuts down."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from aws_world import control, ec2, group, launch, state

from gpusteward.domain.cloud import PROTECT_TAG, STOP_INSTANCE_STEP
from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import Decision, Level, Workload
from gpusteward.integrations.cloud.aws import AwsClient
from gpusteward.integrations.cloud.settings import AwsSettings
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.instance_executor import InstanceExecutor, instance_workload

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def planned(executor: InstanceExecutor, node: str) -> tuple[Decision, Workload]:
    """A stop as the tick plans it: the instance as read then, its workload and decision."""
    inst = executor.control.instances()[node]
    w = instance_workload(inst, (f"{node}-g0",), executor.name)
    d = Decision(
        w.id, T0, Level.INFRA, STOP_INSTANCE_STEP, "idle", rule="instances", idempotency_key=f"{w.id}:k"
    )
    return d, w


def test_a_protect_tag_set_after_the_plan_is_honoured(aws: str) -> None:
    iid = launch(aws, "g5.xlarge", "gpu-a")
    executor = InstanceExecutor(control(aws, SimClock(T0)), SimClock(T0), wait_s=0)
    d, w = planned(executor, "gpu-a")
    ec2(aws).create_tags(Resources=[iid], Tags=[{"Key": PROTECT_TAG, "Value": "true"}])
    with pytest.raises(PreflightFailed, match="protected or excluded since the decision"):
        executor.execute(d, w)
    assert state(aws, iid) == "running"


def test_someone_elses_stop_is_left_alone_and_ours_is_not_done_twice(aws: str) -> None:
    iid = launch(aws, "g5.xlarge", "gpu-a")
    executor = InstanceExecutor(control(aws, SimClock(T0)), SimClock(T0), wait_s=0)
    d, w = planned(executor, "gpu-a")
    ec2(aws).stop_instances(InstanceIds=[iid])
    with pytest.raises(PreflightFailed, match="is stopped, not running: left alone"):
        executor.execute(d, w)
    ec2(aws).start_instances(InstanceIds=[iid])
    first = executor.execute(d, w)
    assert (first.ok, first.verified, state(aws, iid)) == (True, True, "stopped")
    again = executor.execute(d, w)  # a retry after a crash: nothing more is done
    assert again.detail == f"instance {iid} already stopped by gpusteward"
    assert executor.verify(d, w)


def test_a_replaced_instance_is_another_incarnation(aws: str) -> None:
    launch(aws, "g5.xlarge", "gpu-a")
    executor = InstanceExecutor(control(aws, SimClock(T0)), SimClock(T0), wait_s=0)
    _, w = planned(executor, "gpu-a")
    older = replace(w, started_at=w.started_at - timedelta(hours=1))  # the plan saw an earlier launch
    now = executor.current(older)
    assert now is not None
    assert now.incarnation != older.incarnation  # the runner's pre-flight refuses on this


def test_a_scale_in_is_done_when_the_instance_shuts_down(aws: str) -> None:
    ids = group(aws, "pool", 2)
    ctl = control(aws, SimClock(T0), action="asg-scale-in", allow_terminate=True)
    executor = InstanceExecutor(ctl, SimClock(T0), wait_s=0)
    d, w = planned(executor, next(n for n, i in ctl.instances().items() if i.id == ids[1]))
    out = executor.execute(d, w)
    assert out.verified
    assert state(aws, ids[1]) == "terminated"
    assert executor.current(w) is None  # gone: a second try is skipped at pre-flight


def test_an_unreachable_cloud_does_nothing(aws: str) -> None:
    launch(aws, "g5.xlarge", "gpu-a")
    executor = InstanceExecutor(control(aws, SimClock(T0)), SimClock(T0), wait_s=0)
    d, w = planned(executor, "gpu-a")
    down = AwsClient(
        AwsSettings(endpoint_url="http://127.0.0.1:9", max_attempts=1, connect_timeout_seconds=0.5)
    )
    cut = InstanceExecutor(control(aws, SimClock(T0), client=down), SimClock(T0), wait_s=0)
    with pytest.raises(ExecutionError, match=r"cannot read instance .* now, nothing done"):
        cut.execute(d, w)
