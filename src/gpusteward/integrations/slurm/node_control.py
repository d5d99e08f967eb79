"""``NodeControl`` for Slurm: drain / resume a node through ``scontrol`` (argv lists, no shell).

Park: ``scontrol update NodeName=<n> State=DRAIN Reason="gpusteward: ..."``: running jobs go on,
no new job starts there. Unpark: ``State=RESUME``, only on a node whose reason starts with
``gpusteward`` (a drain an admin set for maintenance keeps its own reason and is left alone).
The node's state is read back with ``scontrol show node -o`` (one line per node).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo

from gpusteward.domain.nodes import PARK_REASON_PREFIX, NodeState
from gpusteward.integrations.slurm.commands import SlurmCommandFailed, SlurmRunner

_NAME = re.compile(r"(?:^|\s)NodeName=(\S+)")
_STATE = re.compile(r"(?:^|\s)State=(\S+)")
#: ``Reason=<text> [<user>@<time>]``; the text may hold spaces.
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)\s+\[([^@\]]*)@([^\]]*)\]")
_OUT_OF_SCHEDULING = ("DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "MAINT", "RESERVED")


def parse_node_line(line: str, tz: tzinfo = UTC) -> NodeState | None:
    """One line of ``scontrol show node -o``; None when it names no node."""
    name = _NAME.search(line)
    if name is None:
        return None
    state = _STATE.search(line)
    flags = set(re.split(r"[+*~#!%$@^-]", state.group(1).upper())) if state else set()
    parked = any(f in flags for f in _OUT_OF_SCHEDULING)
    reason, at = "", None
    m = _REASON.search(line)
    if m is not None:
        reason = m.group(1).strip()
        try:
            at = datetime.fromisoformat(m.group(3)).replace(tzinfo=tz).astimezone(UTC)
        except ValueError:
            at = None
    ours = parked and "DRAIN" in "".join(flags) and reason.startswith(PARK_REASON_PREFIX)
    return NodeState(name.group(1), parked, ours, reason, at)


def _local_tz() -> tzinfo:
    tz = datetime.now().astimezone().tzinfo
    return tz if tz is not None else UTC


class SlurmNodeControl:
    """Implements ``gpusteward.domain.nodes.NodeControl`` (named like the source: ``slurm``)."""

    def __init__(self, runner: SlurmRunner, *, name: str = "slurm", tz: tzinfo | None = None) -> None:
        self.runner = runner
        self.name = name
        #: Slurm prints reason times in the controller's local time.
        self.tz = tz or _local_tz()

    def _show(self, *node: str) -> dict[str, NodeState]:
        out = self.runner.run("scontrol", "show", "node", "-o", *node).stdout
        states = (parse_node_line(line, self.tz) for line in out.splitlines() if line.strip())
        return {s.name: s for s in states if s is not None}

    def unschedulable(self) -> Mapping[str, NodeState]:
        return {n: s for n, s in self._show().items() if s.parked}

    def state(self, node: str) -> NodeState | None:
        try:
            return self._show(node).get(node)
        except SlurmCommandFailed as e:
            if "not found" in e.stderr.lower() or "invalid node name" in e.stderr.lower():
                return None
            raise

    def park(self, node: str, reason: str, at: datetime) -> str:
        self.runner.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
        return f"drained node {node} (scontrol update State=DRAIN Reason={reason!r})"

    def unpark(self, node: str) -> str:
        self.runner.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        return f"resumed node {node} (scontrol update State=RESUME)"
