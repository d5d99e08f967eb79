"""L4 instance stops as an ``Executor``: stop-instance / start-instance on a node's instance
workload (``Workload(id="node/<instance-id>", kind=NODE)``), through an ``InstanceControl`` (AWS,
the simulator), so they go through the one ``ActionRunner``: planned, approved, idempotent,
dry-run aware, audited, credited in the ledger.

Pre-flight, right before the change, reads the instance through the cloud's API again: it must
still exist with the same launch time (the runner compares incarnations: a replaced instance is
another one), still be running, and still be neither protected, excluded nor scale-in protected.
A stop counts as verified once the cloud reports the state ``stopped`` (or, for a scale-in, the
instance shutting down); it waits up to ``wait_s`` for that, else the action is recorded as not
yet verified.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import MappingProxyType

from gpusteward.domain.cloud import (
    START_INSTANCE_STEP,
    STOP_INSTANCE_STEP,
    Instance,
    InstanceControl,
    instance_workload_id,
)
from gpusteward.domain.errors import ExecutionError, PreflightFailed, SourceError
from gpusteward.domain.models import Decision, Level, Outcome, Workload, WorkloadKind
from gpusteward.domain.ports import Clock
from gpusteward.runtime.parking_executor import ADMINS

_GONE = ("shutting-down", "terminated")


def instance_workload(inst: Instance, gpu_uuids: Sequence[str], source: str) -> Workload:
    """The workload an instance's L4 steps name; its incarnation is the instance's launch time."""
    return Workload(
        id=instance_workload_id(inst.id),
        kind=WorkloadKind.NODE,
        name=inst.node,
        owner=ADMINS,
        gpus_requested=len(gpu_uuids),
        gpu_uuids=tuple(gpu_uuids),
        started_at=inst.launched_at,
        source=source,
        ref=MappingProxyType(
            {
                "node": inst.node,
                "instance_id": inst.id,
                "instance_type": inst.instance_type,
                "group": inst.group,
            }
        ),
    )


class InstanceExecutor:
    """Implements ``Executor`` for instance workloads of ``control.name`` at L4."""

    def __init__(
        self,
        control: InstanceControl,
        clock: Clock,
        *,
        wait_s: float = 60.0,
        poll_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.control = control
        self.name = control.name
        self.clock = clock
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.sleep = sleep

    def supports(self, workload: Workload, level: Level) -> bool:
        return (
            level is Level.INFRA
            and workload.kind is WorkloadKind.NODE
            and workload.source == self.name
            and "instance_id" in workload.ref
        )

    def _read(self, instance_id: str) -> Instance | None:
        try:
            return self.control.instance(instance_id)
        except SourceError as e:
            raise ExecutionError(f"cannot read instance {instance_id} now, nothing done: {e}") from e

    def current(self, workload: Workload) -> Workload | None:
        inst = self._read(workload.ref["instance_id"])
        if inst is None or inst.state in _GONE:
            return None
        return instance_workload(replace(inst, node=workload.name), workload.gpu_uuids, self.name)

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        iid = workload.ref["instance_id"]
        inst = self._read(iid)
        if inst is None or inst.state in _GONE:
            raise PreflightFailed(f"instance {iid} is gone")
        if decision.step == START_INSTANCE_STEP:
            if inst.state in ("running", "pending") and not inst.recorded:
                return Outcome(True, f"instance {iid} already running", verified=True)
            done = self.control.start(iid, inst.recorded)
            return Outcome(True, done, verified=self.verify(decision, workload))
        if decision.step != STOP_INSTANCE_STEP:
            raise ExecutionError(f"{decision.step} is not something the instance executor does")
        if inst.state in ("stopping", "stopped") and inst.recorded:
            return Outcome(True, f"instance {iid} already stopped by gpusteward", verified=self._settled(iid))
        if inst.state != "running":
            raise PreflightFailed(f"instance {iid} is {inst.state}, not running: left alone")
        now = self.clock.now()
        if inst.excluded(now):
            raise PreflightFailed(f"instance {iid} was protected or excluded since the decision: left alone")
        if inst.group and inst.scale_in_protected:
            raise PreflightFailed(f"instance {iid} got scale-in protection in group {inst.group}: left alone")
        done = self.control.stop(inst, decision.reason)
        return Outcome(True, done, verified=self._settled(iid))

    def _settled(self, instance_id: str) -> bool:
        """Waits (up to ``wait_s``) for the cloud to report the stop done."""
        waited = 0.0
        while True:
            inst = self._read(instance_id)
            if inst is None or inst.state in ("stopped", *_GONE):
                return True
            if waited >= self.wait_s:
                return False
            self.sleep(self.poll_s)
            waited += self.poll_s

    def verify(self, decision: Decision, workload: Workload) -> bool:
        inst = self._read(workload.ref["instance_id"])
        if decision.step == START_INSTANCE_STEP:
            return inst is not None and inst.state == "running"
        return inst is None or inst.state in ("stopped", *_GONE)
