"""``NodeControl`` for a plain server: a flag file, since no scheduler places work on it.

A plain server has no drain switch of its own. gpusteward flags it instead: ``park`` writes
``<flag_dir>/<node>`` (``reason`` and ``since``, one ``key: value`` per line) and ``unpark``
removes a flag it wrote. Whatever starts work there — a login banner, a wrapper around the job
launcher, a node health check such as LBNL NHC — can refuse while the flag is present. A flag an
admin wrote by hand (a reason not starting with ``gpusteward``) is reported, never removed.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.nodes import PARK_REASON_PREFIX, NodeState

#: A node name is a host name: it must never name a path outside the flag directory.
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class FlagFileNodeControl:
    """Implements ``gpusteward.domain.nodes.NodeControl`` for the node(s) a server runs."""

    name = "nvml"

    def __init__(self, flag_dir: Path, nodes: tuple[str, ...]) -> None:
        self.dir = flag_dir
        self.nodes = nodes

    def _path(self, node: str) -> Path:
        if not _SAFE.match(node):
            raise ExecutionError(f"{node!r} is not a node name gpusteward writes a flag for")
        return self.dir / node

    def _read(self, node: str) -> NodeState:
        try:
            text = self._path(node).read_text(encoding="utf-8")
        except FileNotFoundError:
            return NodeState(node, parked=False)
        except OSError as e:
            raise SourceError(f"cannot read the flag of {node}: {e}") from e
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        reason = fields.get("reason", "").strip()
        try:
            since = datetime.fromisoformat(fields["since"].strip()) if "since" in fields else None
        except ValueError:
            since = None
        return NodeState(node, True, reason.startswith(PARK_REASON_PREFIX), reason, since)

    def unschedulable(self) -> Mapping[str, NodeState]:
        states = {n: self._read(n) for n in self.nodes}
        return {n: s for n, s in states.items() if s.parked}

    def state(self, node: str) -> NodeState | None:
        return self._read(node) if node in self.nodes else None

    def park(self, node: str, reason: str, at: datetime) -> str:
        if node not in self.nodes:
            raise ExecutionError(f"{node} is not a node this agent runs on")
        path = self._path(node)
        if self._read(node).parked:
            return f"{node} is already flagged ({path})"
        body = f"reason: {reason}\nsince: {at.isoformat()}\n"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            # Written whole or not at all: a reader never sees half a flag.
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{node}.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
            Path(tmp).replace(path)
        except OSError as e:
            raise ExecutionError(f"cannot write the flag {path}: {e}") from e
        return f"flagged {node} ({path}): start no new work here"

    def unpark(self, node: str) -> str:
        state = self.state(node)
        if state is None or not state.parked:
            return f"{node} carries no flag"
        if not state.ours:
            raise ExecutionError(
                f"the flag on {node} was not written by gpusteward ({state.reason!r}): left alone"
            )
        try:
            self._path(node).unlink(missing_ok=True)
        except OSError as e:
            raise ExecutionError(f"cannot remove the flag of {node}: {e}") from e
        return f"removed the flag on {node}: it takes work again"
