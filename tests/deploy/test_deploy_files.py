"""deploy/systemd units pass `systemd-analyze verify`, hardened as documented; the Containerfile
builds the image deploy/kubernetes runs (not built here: no registry is reachable from CI)."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from gpusteward.cli import app

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
INSTALLED = "/opt/gpusteward/bin/gpusteward"  # where the units' install notes put it
COMMANDS = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_systemd_analyze_verify_finds_nothing_to_say(tmp_path):
    if shutil.which("systemd-analyze") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("systemd-analyze missing under CI (.ci/run installs Debian's systemd)")
        pytest.skip("systemd-analyze not installed (Debian package systemd)")
    assert [u.name for u in UNITS] == ["gpusteward-exporter.service", "gpusteward.service"]
    # verify checks that ExecStart exists: point it at this checkout's gpusteward.
    here = Path(sys.executable).parent / "gpusteward"
    copies = []
    for unit in UNITS:
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace(INSTALLED, str(here)))
        copies.append(str(copy))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *copies], capture_output=True, text=True, timeout=120
    )
    # An unknown key or a bad value is only a warning (exit 0): any line about our units fails.
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "gpusteward" in line]
    assert done.returncode == 0, done.stderr
    assert ours == []


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_run_unprivileged_with_only_the_capabilities_they_need(unit):
    service = _unit(unit)["Service"]
    assert service["DynamicUser"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"
    caps = set(service["CapabilityBoundingSet"].split())
    assert set(service["AmbientCapabilities"].split()) == caps
    # The agent signals other users' processes; the exporter only reads their /proc.
    assert caps == (
        {"CAP_KILL", "CAP_SYS_PTRACE"} if unit.name == "gpusteward.service" else {"CAP_SYS_PTRACE"}
    )
    command = service["ExecStart"].split()
    assert command[0] == INSTALLED
    assert command[1] in COMMANDS


def test_the_agent_keeps_its_state_in_its_state_directory():
    service = _unit(ROOT / "deploy" / "systemd" / "gpusteward.service")["Service"]
    assert service["StateDirectory"] == "gpusteward"
    assert "XDG_STATE_HOME=%S" in service["Environment"]  # the default store.url under /var/lib


def test_the_containerfile_installs_the_wheel_and_runs_gpusteward_as_the_manifests_user():
    text = (ROOT / "Containerfile").read_text()
    instructions = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith("#")]
    keywords = [i[0] for i in instructions if i[0].isupper()]
    assert keywords[0] == "FROM"
    assert instructions[0][1] == "python:3.11-slim"
    copy = next(i[1] for i in instructions if i[0] == "COPY")
    assert re.fullmatch(r"dist/gpusteward-\*-py3-none-any\.whl /tmp/", copy)  # what `make package` builds
    assert next(i[1] for i in instructions if i[0] == "ENTRYPOINT") == '["gpusteward"]'
    user = next(i[1] for i in instructions if i[0] == "USER")
    deployment = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    run_as = deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert user == f"{run_as}:{run_as}"
    # The manifests' args are commands of this CLI (the entrypoint is gpusteward).
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "gpusteward"
    assert container["args"][0] in COMMANDS
