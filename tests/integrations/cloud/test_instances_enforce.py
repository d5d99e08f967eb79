"""L4 instance stops end to end, in enforce mode, against moto's server: the whole tick (rules,
policy, approvals, the one runner, the ledger) with ``cloud.instances`` on.

Five GPU nodes run on EC2: an idle on-demand p4d.24xlarge, a g5 busy with a job, an idle g5
tagged ``gpusteward.io/protect=true``, and an Auto Scaling group of two idle g5s, one of them
scale-in protected. After ``idle_minutes`` the idle, unprotected ones' stops wait for an approval;
once approved the p4d is stopped and the unprotected group member put in standby and stopped
(the group's desired capacity one lower); the busy and protected ones keep running. The savings
are credited at the instance's own price. ``gpusteward restore node/<id>`` brings them back. When
the AWS endpoint goes down, nothing is planned from what could not be read.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from aws_world import autoscaling, desired, ec2, group, launch, lifecycle_state, state

from gpusteward.cli.main import app
from gpusteward.domain.cloud import PROTECT_TAG
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ApprovalStatus, Gpu, Observation, Owner, Sample, Workload, WorkloadKind
from gpusteward.integrations.cloud import build as cloud
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.registry import build_context
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 3, 2, 1, 0, tzinfo=UTC)
#: The instance's own price (cloud.instances.price_per_hour_by_type), not 8 x the table's A100.
P4D_PRICE = 32.77


@dataclass
class Nodes:
    """What a GPU metric source sees: each node's GPUs while its instance runs (a stopped
    instance's node is gone), the busy node's GPUs held by a job at 95 %."""

    endpoint: str
    nodes: dict[str, tuple[str, int, str]]  # node → (instance id, GPUs, model)
    busy: str
    name: str = "fake"

    def observe(self, now: datetime) -> Observation:
        pages = ec2(self.endpoint).describe_instances()["Reservations"]
        states = {i["InstanceId"]: i["State"]["Name"] for r in pages for i in r["Instances"]}
        gpus: list[Gpu] = []
        samples: list[Sample] = []
        jobs: list[Workload] = []
        for node, (iid, count, model) in sorted(self.nodes.items()):
            if states.get(iid) != "running":
                continue
            mine = [Gpu(f"{node}-g{k}", node, k, model, 40960.0) for k in range(count)]
            util = 95.0 if node == self.busy else 0.0
            gpus += mine
            samples += [
                Sample(g.uuid, now, util, 30000.0 if util else 0.0, 300.0 if util else 60.0) for g in mine
            ]
            if node == self.busy:
                uuids = tuple(g.uuid for g in mine)
                jobs.append(
                    Workload(
                        "job-1",
                        WorkloadKind.JOB,
                        "train",
                        Owner("bob"),
                        count,
                        uuids,
                        T0 - timedelta(hours=1),
                    )
                )
        return Observation(now, tuple(gpus), tuple(samples), tuple(jobs))

    def close(self) -> None:
        pass


def settings(endpoint: str, mode: str = "enforce", **instances: Any) -> Settings:
    return load_settings(
        None,
        mode=mode,
        tick_seconds=60,
        cloud={
            "provider": "aws",
            "aws": {"endpoint_url": endpoint, "max_attempts": 2, "connect_timeout_seconds": 0.5},
            "instances": {
                "enabled": True,
                "idle_minutes": 10,
                "reserve_nodes": 0,
                "max_per_tick": 5,
                "stop_wait_seconds": 0,
                "price_per_hour_by_type": {"p4d.24xlarge": P4D_PRICE},
                **instances,
            },
        },
    )


def world(endpoint: str) -> tuple[Nodes, dict[str, str]]:
    ids = {
        "gpu-a": launch(endpoint, "p4d.24xlarge", "gpu-a"),
        "gpu-b": launch(endpoint, "g5.xlarge", "gpu-b"),
        "gpu-c": launch(endpoint, "g5.xlarge", "gpu-c", **{PROTECT_TAG: "true"}),
    }
    kept, taken = group(endpoint, "pool", 2)
    autoscaling(endpoint).set_instance_protection(
        AutoScalingGroupName="pool", InstanceIds=[kept], ProtectedFromScaleIn=True
    )
    ids |= {"kept": kept, "taken": taken}
    # The group's nodes go by their instance ids (joined through the alias), the others by Name.
    nodes = {
        "gpu-a": (ids["gpu-a"], 8, "NVIDIA A100-SXM4-40GB"),
        "gpu-b": (ids["gpu-b"], 1, "NVIDIA A10G"),
        "gpu-c": (ids["gpu-c"], 1, "NVIDIA A10G"),
        kept: (kept, 1, "NVIDIA A10G"),
        taken: (taken, 1, "NVIDIA A10G"),
    }
    return Nodes(endpoint, nodes, busy="gpu-b"), ids


def steward_for(cfg: Settings, source: Nodes, clock: SimClock, store: MemoryStore) -> Any:
    parts = cloud.build(cfg.cloud, build_context(cfg, clock), prices=cfg.cost)
    integration = Integration(name="fake", source=source, instances=parts.instances)
    steward, _ = build_steward(
        cfg, clock=clock, store=store, integration=integration, notifier=MemoryNotifier(), backfill=False
    )
    return steward


def test_idle_instances_are_stopped_after_approval_and_restored(aws: str, tmp_path: Path) -> None:
    source, ids = world(aws)
    cfg = settings(aws)
    clock, store = SimClock(T0), MemoryStore()
    steward = steward_for(cfg, source, clock, store)
    stopped_at = None
    for _ in range(40):
        steward.tick()
        clock.advance(60)
        for a in store.approvals(ApprovalStatus.PENDING):
            if a.workload_id.startswith("node/"):
                store.decide_approval(a.id, approve=True, by="ops", at=clock.now(), reason="night")
        if stopped_at is None and state(aws, ids["gpu-a"]) == "stopped":
            stopped_at = clock.now()
    assert stopped_at is not None
    assert stopped_at - T0 >= timedelta(minutes=10)  # idle_minutes, then the approval
    assert state(aws, ids["gpu-a"]) == "stopped"
    assert (state(aws, ids["taken"]), lifecycle_state(aws, ids["taken"])) == ("stopped", "Standby")
    assert desired(aws, "pool") == 1
    # Busy, protected by tag, scale-in protected: still running.
    assert [state(aws, ids[k]) for k in ("gpu-b", "gpu-c", "kept")] == ["running"] * 3
    actions = [a for a in store.actions() if a.workload_id.startswith("node/")]
    assert sorted((a.workload_id, a.status.value) for a in actions) == sorted(
        [(f"node/{ids['gpu-a']}", "succeeded"), (f"node/{ids['taken']}", "succeeded")]
    )
    # Credited at the instance's own price per hour, from the stop to now (written as the loop
    # stops: the ledger is written every 5 minutes).
    steward.settle()
    saved = sum(a.saved_cost for k, a in store.ledger.daily.items() if k.kind == "instances")
    hours = (clock.now() - stopped_at).total_seconds() / 3600
    assert saved == pytest.approx(P4D_PRICE * hours + 1.00 * hours, rel=0.1)

    config = tmp_path / "gpusteward.yaml"
    config.write_text(json.dumps({"cloud": cfg.cloud.model_dump(mode="json")}))
    for target in ("node/gpu-a", f"node/{ids['taken']}"):
        got = CliRunner().invoke(app, ["restore", target, "--config", str(config), "--json"])
        assert got.exit_code == 0, got.output
        assert json.loads(got.stdout.splitlines()[-1])["restored"] is True
    assert state(aws, ids["gpu-a"]) == "running"
    assert (state(aws, ids["taken"]), lifecycle_state(aws, ids["taken"]), desired(aws, "pool")) == (
        "running",
        "InService",
        2,
    )
    again = CliRunner().invoke(app, ["restore", "node/gpu-a", "--config", str(config)])
    assert again.exit_code == 1  # nothing of gpusteward's left to undo
    assert "no instance that gpusteward stopped" in again.output


def test_nothing_is_stopped_from_what_could_not_be_read(aws: str, caplog: pytest.LogCaptureFixture) -> None:
    source, ids = world(aws)
    down = settings("http://127.0.0.1:9")
    clock, store = SimClock(T0), MemoryStore()
    steward = steward_for(down, source, clock, store)
    with caplog.at_level(logging.WARNING):
        for _ in range(15):
            report = steward.tick()
            clock.advance(60)
            assert not [d for d in report.decisions if d.workload_id.startswith("node/")]
    assert "instance stops skipped this tick: cannot read the instances" in caplog.text
    assert "EndpointConnectionError" in caplog.text
    assert all(state(aws, i) == "running" for i in ids.values())


def test_a_dry_run_stops_nothing(aws: str) -> None:
    source, ids = world(aws)
    cfg = settings(aws, mode="dry-run")
    assert cfg.dry_run
    clock, store = SimClock(T0), MemoryStore()
    steward = steward_for(cfg, source, clock, store)
    planned = []
    for _ in range(15):
        report = steward.tick()
        clock.advance(60)
        planned += [d for d in report.decisions if d.workload_id.startswith("node/") and d.acts]
    assert {d.workload_id for d in planned} == {f"node/{ids['gpu-a']}", f"node/{ids['taken']}"}
    assert all(state(aws, i) == "running" for i in ids.values())
