"""L4 parking on the real one-node Slurm cluster: drain with gpusteward's reason, resume only ours."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from tests.integrations.slurm.conftest import NODE, SlurmCluster

from gpusteward.domain.errors import PreflightFailed
from gpusteward.domain.models import Decision, Level
from gpusteward.integrations.slurm.commands import SlurmRunner
from gpusteward.integrations.slurm.node_control import SlurmNodeControl, parse_node_line
from gpusteward.runtime.parking_executor import PARK_REASON, NodeParkingExecutor, node_workload

NOW = datetime(2026, 1, 5, 22, 30, tzinfo=UTC)


def decision(step: str) -> Decision:
    return Decision(f"node:{NODE}", NOW, Level.INFRA, step, "idle", idempotency_key=f"node:{NODE}:{step}")


@pytest.fixture
def control(slurm: SlurmCluster) -> Iterator[SlurmNodeControl]:
    c = SlurmNodeControl(SlurmRunner(slurm_conf=slurm.conf, timeout_s=20, env=slurm.env))
    yield c
    slurm.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME", check=False)
    slurm.wait_idle()


def test_drain_then_resume_keeps_the_reason_and_is_verified(control: SlurmNodeControl) -> None:
    ex = NodeParkingExecutor(control)
    w = node_workload(NODE, [f"GPU-{i}" for i in range(4)], "slurm")
    assert ex.supports(w, Level.INFRA)
    assert not ex.supports(w, Level.FORCE)
    assert ex.current(w) == w
    before = control.state(NODE)
    assert before is not None
    assert not before.parked

    out = ex.execute(decision("park-node"), w)
    assert out.ok, out.detail
    assert out.verified, out.detail
    st = control.state(NODE)
    assert st is not None
    assert st.parked
    assert st.ours
    assert st.reason == PARK_REASON
    assert st.parked_at is not None
    assert abs((st.parked_at - datetime.now(UTC)).total_seconds()) < 600
    assert NODE in control.unschedulable()
    # Idempotent: parking again changes nothing.
    assert "already parked" in ex.execute(decision("park-node"), w).detail

    out = ex.execute(decision("unpark-node"), w)
    assert out.ok, out.detail
    assert out.verified, out.detail
    st = control.state(NODE)
    assert st is not None
    assert not st.parked
    assert control.unschedulable() == {}


def test_a_drain_someone_else_set_is_never_resumed_nor_overwritten(
    control: SlurmNodeControl, slurm: SlurmCluster
) -> None:
    slurm.run("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=disk replacement")
    ex = NodeParkingExecutor(control)
    w = node_workload(NODE, ["GPU-0"], "slurm")
    st = control.state(NODE)
    assert st is not None
    assert st.parked
    assert not st.ours
    assert st.reason == "disk replacement"
    with pytest.raises(PreflightFailed, match="left alone"):
        ex.execute(decision("unpark-node"), w)
    with pytest.raises(PreflightFailed, match="left alone"):
        ex.execute(decision("park-node"), w)
    time.sleep(0.1)
    st = control.state(NODE)
    assert st is not None
    assert st.parked
    assert st.reason == "disk replacement"


def test_an_unknown_node_has_no_state(control: SlurmNodeControl) -> None:
    assert control.state("no-such-node") is None


@pytest.mark.parametrize(
    ("line", "parked", "ours", "reason"),
    [
        ("NodeName=a Arch=x86_64 State=IDLE ThreadsPerCore=1", False, False, ""),
        (
            "NodeName=a State=IDLE+DRAIN Partitions=gpu Reason=gpusteward: idle, low-load window "
            "[root@2026-01-05T22:00:01]",
            True,
            True,
            "gpusteward: idle, low-load window",
        ),
        ("NodeName=a State=MIXED+DRAIN Reason=bad dimm [admin@2026-01-05T22:00:01]", True, False, "bad dimm"),
        (
            "NodeName=a State=DOWN* Reason=Not responding [slurm@2026-01-05T22:00:01]",
            True,
            False,
            "Not responding",
        ),
    ],
)
def test_parse_node_line(line: str, parked: bool, ours: bool, reason: str) -> None:
    st = parse_node_line(line, UTC)
    assert st is not None
    assert (st.name, st.parked, st.ours, st.reason) == ("a", parked, ours, reason)
    if reason:
        assert st.parked_at == datetime(2026, 1, 5, 22, 0, 1, tzinfo=UTC)
