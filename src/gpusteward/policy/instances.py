"""L4 instance stops, planned: which idle GPU nodes' cloud instances to stop. Pure.

A node's instance is a candidate when it is running, every GPU the instance has is seen on the
node, none is held by a workload, and all have been free and idle with fresh data for
``idle_minutes`` (a node parked by gpusteward is free like any other). It is never one that is
protected or excluded for now (``gpusteward.io/protect``, ``gpusteward.io/exclude-until`` on the
instance or its group), one with scale-in protection in its group, or one of a lifecycle not in
``lifecycles``. ``reserve_nodes`` idle instances stay running (the most recently idle ones), so
new work does not wait for a boot; at most ``max_per_tick`` are stopped per tick.

Nothing is started here: a stopped instance comes back with ``gpusteward restore node/<id>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from gpusteward.domain.cloud import START_INSTANCE_STEP, STOP_INSTANCE_STEP, Instance, instance_workload_id
from gpusteward.domain.models import Decision, Level
from gpusteward.policy.instance_settings import InstanceSettings
from gpusteward.policy.ladder import Step
from gpusteward.policy.parking import NodeView

STOP = Step(STOP_INSTANCE_STEP, Level.INFRA, "instance stop")
START = Step(START_INSTANCE_STEP, Level.INFRA, "instance start")
RULE = "instances"


@dataclass(frozen=True, slots=True)
class InstanceInput:
    now: datetime
    nodes: Sequence[NodeView]
    #: The running or stopped instance behind each node, by node name.
    instances: Mapping[str, Instance]
    paused: bool = False


@dataclass(frozen=True, slots=True)
class InstanceNote:
    """Why one node's instance is or is not stopped this tick (for logs, `explain`)."""

    node: str
    instance_id: str
    why: str


@dataclass(frozen=True, slots=True)
class InstancePlan:
    stops: tuple[Decision, ...]
    notes: tuple[InstanceNote, ...]


def _ts(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def refusal(node: NodeView, inst: Instance, now: datetime, s: InstanceSettings) -> str | None:
    """Why this node's instance may not be stopped whatever its idle time, or None."""
    if inst.state != "running":
        return f"instance is {inst.state}"
    if inst.protected:
        return "tagged gpusteward.io/protect=true"
    if inst.exclude_until is not None and now < inst.exclude_until:
        return f"excluded until {inst.exclude_until.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    if inst.group and inst.scale_in_protected:
        return f"scale-in protected in Auto Scaling group {inst.group}"
    if inst.lifecycle.value not in s.lifecycles:
        return f"{inst.lifecycle.value} instance (cloud.instances.lifecycles: {', '.join(s.lifecycles)})"
    if node.gpus < inst.gpus:
        return f"only {node.gpus} of its {inst.gpus} GPUs are seen: the others may be in use"
    return None


def plan_instances(inp: InstanceInput, s: InstanceSettings) -> InstancePlan:
    """This tick's instance stops, with a note for every node that has an instance."""
    if inp.paused:
        return InstancePlan((), ())
    notes: list[InstanceNote] = []
    idle_running = 0
    ready: list[tuple[NodeView, Instance]] = []
    need = timedelta(minutes=s.idle_minutes)
    for node in inp.nodes:
        inst = inp.instances.get(node.name)
        if inst is None:
            continue
        free = node.held == 0 and node.free_since is not None
        if free and inst.state == "running":
            idle_running += 1  # an idle running instance is reserve, whether it may be stopped or not
        why = refusal(node, inst, inp.now, s)
        if why is None and node.held:
            why = f"{node.held} GPU(s) held by workloads"
        if why is None and node.free_since is None:
            why = "not every GPU is idle with fresh data"
        if why is None and node.free_since is not None and inp.now - node.free_since < need:
            minutes = (inp.now - node.free_since).total_seconds() / 60
            why = f"idle {minutes:.0f} of {s.idle_minutes:.0f} min"
        if why is not None:
            notes.append(InstanceNote(node.name, inst.id, why))
            continue
        ready.append((node, inst))
    ready.sort(key=lambda p: (p[0].free_since, p[0].name))  # longest idle first
    room = min(s.max_per_tick, max(0, idle_running - s.reserve_nodes))
    stops: list[Decision] = []
    for i, (node, inst) in enumerate(ready):
        if i >= room:
            why = (
                f"at most {s.max_per_tick} stop(s) per tick"
                if len(stops) >= s.max_per_tick
                else f"kept running: the reserve of {s.reserve_nodes} idle instance(s)"
            )
            notes.append(InstanceNote(node.name, inst.id, why))
            continue
        stops.append(_stop(node, inst, inp.now, idle_running - len(stops) - 1, s))
        notes.append(InstanceNote(node.name, inst.id, "stopped"))
    return InstancePlan(tuple(stops), tuple(notes))


def _how(inst: Instance, s: InstanceSettings) -> str:
    if not inst.group:
        return "stop the instance"
    if s.action == "asg-scale-in":
        return f"terminate it in Auto Scaling group {inst.group}, lowering its desired capacity"
    return f"put it in standby in Auto Scaling group {inst.group} (desired capacity lowered), then stop it"


def _stop(node: NodeView, inst: Instance, now: datetime, left_idle: int, s: InstanceSettings) -> Decision:
    assert node.free_since is not None
    minutes = (now - node.free_since).total_seconds() / 60.0
    price = f"{inst.price_per_hour:.2f} {inst.currency}/h" if inst.price_per_hour > 0 else "unpriced"
    reason = (
        f"all {node.gpus} GPUs of node {node.name} free and idle for {minutes:.0f} min; its "
        f"{inst.lifecycle.value} instance {inst.id} ({inst.instance_type}, {price}): {_how(inst, s)}; "
        f"{left_idle} idle instance(s) stay running"
    )
    wid = instance_workload_id(inst.id)
    # One stop per instance launch and free episode: a restored instance idle again gets a new key.
    key = f"{wid}:stop:{_ts(inst.launched_at)}:{_ts(node.free_since)}"
    return Decision(
        workload_id=wid,
        at=now,
        level=STOP.level,
        step=STOP.name,
        reason=reason,
        rule=RULE,
        gpu_uuids=node.gpu_uuids,
        idempotency_key=key,
    )


def match_nodes(instances: Mapping[str, Instance], node_names: Sequence[str]) -> dict[str, Instance]:
    """Each of the cluster's nodes with the instance behind it: by the name the cloud side gave it,
    else by one of its aliases (an alias two instances share names neither). The instance comes
    back with ``node`` set to the cluster's name."""
    by_alias: dict[str, list[Instance]] = {}
    for each in instances.values():
        for a in {each.node, *each.aliases} - {""}:
            by_alias.setdefault(a, []).append(each)
    out: dict[str, Instance] = {}
    taken: set[str] = set()
    for name in sorted(node_names):
        hits = by_alias.get(name, [])
        inst = instances.get(name) or (hits[0] if len(hits) == 1 else None)
        if inst is None or inst.id in taken:
            continue
        taken.add(inst.id)
        out[name] = inst if inst.node == name else replace(inst, node=name)
    return out
