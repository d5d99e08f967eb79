"""The instance-stop planner, table-driven: which idle nodes' instances are stopped, and why the
others are not; and the join of instances to the cluster's node names."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.cloud import Instance, Lifecycle
from gpusteward.domain.models import Level
from gpusteward.policy.instance_settings import InstanceSettings
from gpusteward.policy.instances import InstanceInput, match_nodes, plan_instances
from gpusteward.policy.parking import NodeView

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LAUNCHED = NOW - timedelta(days=3)


def node(name: str, idle_min: float | None = 200, held: int = 0, gpus: int = 8) -> NodeView:
    since = NOW - timedelta(minutes=idle_min) if idle_min is not None else None
    return NodeView(name, "default", tuple(f"{name}-g{i}" for i in range(gpus)), held, since)


def inst(name: str, **kw: object) -> Instance:
    base = Instance(
        id=f"i-{name}",
        node=name,
        instance_type="p4d.24xlarge",
        lifecycle=Lifecycle.ON_DEMAND,
        state="running",
        launched_at=LAUNCHED,
        gpus=8,
        price_per_hour=14.4,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def plan(
    nodes: list[NodeView], instances: list[Instance], **settings: object
) -> tuple[list[str], dict[str, str]]:
    s = InstanceSettings(**{"reserve_nodes": 0, "max_per_tick": 10, **settings})  # type: ignore[arg-type]
    out = plan_instances(InstanceInput(NOW, nodes, {i.node: i for i in instances}), s)
    return [d.workload_id for d in out.stops], {n.node: n.why for n in out.notes}


@pytest.mark.parametrize(
    ("case", "n", "i", "why"),
    [
        ("busy", node("a", held=1), inst("a"), "1 GPU(s) held by workloads"),
        ("not idle", node("a", idle_min=None), inst("a"), "not every GPU is idle with fresh data"),
        ("idle too short", node("a", idle_min=30), inst("a"), "idle 30 of 120 min"),
        ("protected", node("a"), inst("a", protected=True), "tagged gpusteward.io/protect=true"),
        ("excluded", node("a"), inst("a", exclude_until=NOW + timedelta(hours=1)), "excluded until"),
        (
            "scale-in protected",
            node("a"),
            inst("a", group="pool", scale_in_protected=True),
            "scale-in protected",
        ),
        ("spot", node("a"), inst("a", lifecycle=Lifecycle.SPOT), "spot instance"),
        ("reserved", node("a"), inst("a", lifecycle=Lifecycle.RESERVED), "reserved instance"),
        ("stopped already", node("a"), inst("a", state="stopped"), "instance is stopped"),
        ("GPUs unseen", node("a", gpus=4), inst("a"), "only 4 of its 8 GPUs are seen"),
    ],
)
def test_an_instance_is_left_alone(case: str, n: NodeView, i: Instance, why: str) -> None:
    stops, notes = plan([n], [i])
    assert stops == []
    assert why in notes["a"]


def test_an_idle_on_demand_instance_is_stopped_with_its_price_and_a_stable_key() -> None:
    stops = plan_instances(
        InstanceInput(NOW, [node("a")], {"a": inst("a")}), InstanceSettings(reserve_nodes=0)
    )
    assert len(stops.stops) == 1
    d = stops.stops[0]
    assert (d.workload_id, d.level, d.step) == ("node/i-a", Level.INFRA, "stop-instance")
    assert "p4d.24xlarge, 14.40 USD/h" in d.reason
    assert "stop the instance" in d.reason
    assert d.gpu_uuids == node("a").gpu_uuids
    s = InstanceSettings(reserve_nodes=0)
    later = plan_instances(InstanceInput(NOW + timedelta(minutes=5), [node("a")], {"a": inst("a")}), s)
    assert later.stops[0].idempotency_key == d.idempotency_key  # the same free episode, the same stop
    relaunched = inst("a", launched_at=NOW - timedelta(hours=4))
    other = plan_instances(InstanceInput(NOW, [node("a")], {"a": relaunched}), s)
    assert other.stops[0].idempotency_key != d.idempotency_key  # restored and idle again: a new stop
    assert d.idempotency_key.startswith("node/i-a:stop:")


def test_a_group_member_is_put_in_standby_unless_scale_in_is_allowed() -> None:
    i = inst("a", group="pool")
    stops, _ = plan([node("a")], [i])
    assert stops == ["node/i-a"]
    s = InstanceSettings(reserve_nodes=0, action="asg-scale-in", allow_terminate=True)
    out = plan_instances(InstanceInput(NOW, [node("a")], {"a": i}), s)
    assert "terminate it in Auto Scaling group pool" in out.stops[0].reason
    with pytest.raises(ValueError, match="allow_terminate"):
        InstanceSettings(action="asg-scale-in")


def test_the_reserve_keeps_the_most_recently_idle_running() -> None:
    nodes = [node("a", idle_min=300), node("b", idle_min=200), node("c", idle_min=150)]
    instances = [inst("a"), inst("b"), inst("c")]
    stops, notes = plan(nodes, instances, reserve_nodes=2)
    assert stops == ["node/i-a"]
    assert "reserve of 2" in notes["b"]
    # A protected idle instance is reserve too: it runs whatever is decided.
    stops, _ = plan(nodes, [inst("a"), inst("b"), inst("c", protected=True)], reserve_nodes=1)
    assert stops == ["node/i-a", "node/i-b"]


def test_at_most_max_per_tick_and_nothing_when_paused() -> None:
    nodes = [node("a", idle_min=300), node("b", idle_min=200)]
    stops, notes = plan(nodes, [inst("a"), inst("b")], max_per_tick=1)
    assert stops == ["node/i-a"]
    assert "at most 1 stop(s) per tick" in notes["b"]
    s = InstanceSettings(reserve_nodes=0)
    assert plan_instances(InstanceInput(NOW, nodes, {"a": inst("a")}, paused=True), s).stops == ()


def test_nodes_join_instances_by_name_or_by_one_alias() -> None:
    by_dns = inst("ip-10-0-0-1.ec2.internal", aliases=("ip-10-0-0-1", "10.0.0.1", "aws:///us-east-1a/i-x"))
    shared = inst("other", id="i-y", aliases=("dup",))
    shared2 = inst("other2", id="i-z", aliases=("dup",))
    found = {i.node: i for i in (by_dns, shared, shared2)}
    joined = match_nodes(found, ["ip-10-0-0-1", "dup", "other", "nothing"])
    assert sorted(joined) == ["ip-10-0-0-1", "other"]
    assert joined["ip-10-0-0-1"].node == "ip-10-0-0-1"  # the cluster's name from now on
    assert joined["other"].id == "i-y"
