"""A plain server's flag (integrations/nvml/node_control.py): an L4 step on a server with no
scheduler writes a flag file named after the node, and removes only its own."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.nodes import NodeControl
from gpusteward.integrations.nvml.build import build as build_nvml
from gpusteward.integrations.nvml.fake import FakeNvmlLib
from gpusteward.integrations.nvml.node_control import FlagFileNodeControl
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.parking_executor import DRAIN_REASON, drained_for_health
from gpusteward.runtime.registry import build_context

from .conftest import capture

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def test_park_writes_a_flag_and_unpark_removes_only_its_own(tmp_path: Path) -> None:
    flags = FlagFileNodeControl(tmp_path / "flags", ("gpu-07",))
    assert isinstance(flags, NodeControl)
    assert flags.unschedulable() == {}
    assert flags.state("gpu-07") is not None
    assert flags.state("elsewhere") is None

    done = flags.park("gpu-07", DRAIN_REASON, AT)
    assert "flagged gpu-07" in done
    text = (tmp_path / "flags" / "gpu-07").read_text()
    assert text == f"reason: {DRAIN_REASON}\nsince: 2026-12-01T09:30:00+00:00\n"
    state = flags.unschedulable()["gpu-07"]
    assert (state.parked, state.ours, state.reason, state.parked_at) == (True, True, DRAIN_REASON, AT)
    assert drained_for_health(state)  # parking will not put it back: an admin does, after the repair
    assert "already flagged" in flags.park("gpu-07", DRAIN_REASON, AT)
    assert not [p for p in (tmp_path / "flags").iterdir() if p.name.startswith(".")]  # no temp file left

    assert "removed" in flags.unpark("gpu-07")
    assert not (tmp_path / "flags" / "gpu-07").exists()
    assert flags.unpark("gpu-07") == "gpu-07 carries no flag"


def test_an_admins_flag_is_reported_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "gpu-07").write_text("reason: PSU swap on Thursday\n")
    flags = FlagFileNodeControl(tmp_path, ("gpu-07",))
    state = flags.unschedulable()["gpu-07"]
    assert (state.parked, state.ours, state.parked_at) == (True, False, None)
    with pytest.raises(ExecutionError, match="not written by gpusteward"):
        flags.unpark("gpu-07")
    assert (tmp_path / "gpu-07").exists()


@pytest.mark.parametrize("node", ["../etc/passwd", "a/b", "", ".hidden"])
def test_a_node_name_never_names_a_path_outside_the_flag_directory(tmp_path: Path, node: str) -> None:
    flags = FlagFileNodeControl(tmp_path, (node,))
    with pytest.raises(ExecutionError):
        flags.park(node, DRAIN_REASON, AT)
    assert list(tmp_path.iterdir()) == []


def test_the_nvml_integration_flags_only_where_a_flag_dir_is_set(tmp_path: Path) -> None:
    def integration(nvml: dict[str, object]) -> object:
        settings = load_settings(None, source={"name": "nvml", "nvml": {"node": "gpu-07", **nvml}})
        lib = FakeNvmlLib(capture("linux-x86_64__nvidia-h200__590.48.01", "load"))
        return build_nvml(settings.source.nvml, build_context(settings, SimClock(AT)), lib=lib).node_control

    assert integration({}) is None  # a failed GPU is then only reported
    control = integration({"flag_dir": str(tmp_path)})
    assert isinstance(control, FlagFileNodeControl)
    assert control.nodes == ("gpu-07",)
