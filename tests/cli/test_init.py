"""`gpusteward init` in folders that look like each environment: what it writes loads and scans.

Slurm is a fake `squeue` on PATH printing a real `squeue --json` capture; Kubernetes is a kubeconfig
pointing at the test fake API server; Prometheus is a real server on loopback (Debian's
prometheus, as the prometheus source's tests use). PATH holds only the fakes, HOME is empty.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app, detect
from gpusteward.integrations.prometheus.localserver import LocalPrometheus, binaries
from gpusteward.runtime.config import load_settings

sys.path.insert(0, str(Path(__file__).parents[1] / "integrations" / "kubernetes"))

from k8s_cluster import scenario
from k8s_fakeapi import FakeApiServer

runner = CliRunner()
SQUEUE = Path(__file__).parents[1] / "fixtures" / "slurm" / "squeue_22.05_gpus_array.json"
NOWHERE = "http://127.0.0.1:9"  # discard port: nothing answers


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    if binaries() is None:
        msg = "prometheus/promtool not installed (apt-get install prometheus)"
        if os.environ.get("CI") == "true":  # .ci/run installs it
            pytest.fail(msg)
        pytest.skip(msg)
    prom = LocalPrometheus(tmp_path_factory.mktemp("prom"))
    prom.start()
    yield prom.url
    prom.stop()


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Path:
    """An empty machine: no tools on PATH, an empty HOME, no Prometheus on localhost:9090."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(detect, "LOCAL_PROMETHEUS", NOWHERE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _init(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["init", "--yes", *args])
    return result.exit_code, result.output


def _written(path: Path, source: str):
    settings = load_settings(path)
    assert settings.source.name == source
    assert settings.mode == "dry-run"
    assert "# " in path.read_text()  # commented
    return settings


def test_nothing_found_gives_the_simulator_and_a_scan(machine):
    code, text = _init()
    assert code == 0, text
    _written(machine / "gpusteward.yaml", "sim")
    assert "no squeue on PATH" in text
    assert "scan at" in text


def test_slurm_on_path_gives_the_slurm_source_with_prometheus_metrics(machine, prometheus):
    squeue = machine / "bin" / "squeue"
    squeue.write_text(f"#!/bin/sh\nexec /bin/cat {SQUEUE}\n")
    squeue.chmod(0o755)
    code, text = _init("--prometheus", prometheus, "--path", "conf/slurm.yaml")
    assert code == 0, text
    settings = _written(machine / "conf" / "slurm.yaml", "slurm")
    assert settings.source.slurm.metrics == "prometheus"
    assert settings.source.prometheus.url == prometheus
    assert "scan at" in text


def test_a_kubeconfig_gives_the_kubernetes_source(machine, prometheus, monkeypatch):
    server = FakeApiServer(scenario()).start()
    try:
        kubeconfig = machine / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
            f"clusters: [{{name: test, cluster: {{server: '{server.url}'}}}}]\n"
            "users: [{name: test, user: {token: test}}]\n"
            "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        code, text = _init("--prometheus", prometheus)
        assert code == 0, text
        settings = _written(machine / "gpusteward.yaml", "kubernetes")
        assert settings.source.kubernetes.kubeconfig == kubeconfig
        # The scan read the fake cluster's pods (the metrics are empty: nothing is judged yet).
        assert any(c.path.endswith("/pods") for c in server.cluster.calls), server.cluster.calls[:5]
    finally:
        server.stop()


def test_a_prometheus_on_localhost_is_found_without_being_named(machine, prometheus, monkeypatch):
    monkeypatch.setattr(detect, "LOCAL_PROMETHEUS", prometheus)
    code, text = _init()
    assert code == 0, text
    settings = _written(machine / "gpusteward.yaml", "prometheus")
    assert settings.source.prometheus.url == prometheus
    assert f"{prometheus} is ready" in text


def test_an_unreachable_source_is_written_and_reported(machine):
    code, text = _init("--prometheus", NOWHERE)
    assert code == 1
    _written(machine / "gpusteward.yaml", "prometheus")
    assert "did not answer" in text


def test_an_existing_file_is_never_overwritten_without_force(machine):
    target = machine / "gpusteward.yaml"
    target.write_text("mode: enforce\n")
    code, text = _init("--no-scan")
    assert code == 2
    assert "--force" in text
    assert target.read_text() == "mode: enforce\n"
    code, text = _init("--no-scan", "--force")
    assert code == 0, text
    _written(target, "sim")


def test_without_yes_it_asks_and_a_script_must_say_yes(machine):
    result = runner.invoke(app, ["init", "--no-scan"])  # the runner's input is not a terminal
    assert result.exit_code == 2
    assert "--yes" in result.output
    assert not (machine / "gpusteward.yaml").exists()
