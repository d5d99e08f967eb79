"""The shipped Prometheus rules and Grafana dashboard.

The rules pass ``promtool check rules`` and, loaded into a real Prometheus over the planted
cluster, alert on exactly the idle held dcgm-exporter GPUs gpusteward finds. Every
dashboard expression runs on that Prometheus and names only metrics that dcgm-exporter
or gpusteward export.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from gpusteward.integrations.prometheus.localserver import LocalPrometheus, Series, binaries, check_rules
from gpusteward.web.metrics import StewardMetrics

ROOT = Path(__file__).parents[3]
RULES = ROOT / "deploy" / "prometheus" / "gpusteward-rules.yaml"
RULE_TESTS = RULES.with_name("gpusteward-rules.test.yaml")
DASHBOARD = ROOT / "deploy" / "grafana" / "gpusteward-dashboard.json"
FIXTURES = Path(__file__).parents[2] / "fixtures" / "prometheus"

KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
}


def test_promtool_accepts_the_rules(need_prom: None) -> None:
    res = check_rules(RULES)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_promtool_unit_tests_of_the_rules_pass(need_prom: None) -> None:
    """GpuFailed, GpuDegrading and GpuQueueTimeHigh fire after their ``for`` and not before."""
    found = binaries()
    assert found is not None
    res = subprocess.run(
        [found[1], "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,  # rule_files are relative to the test file
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert {"GpuFailed", "GpuDegrading", "GpuQueueTimeHigh"} <= tested


def test_the_rules_alert_on_the_planted_idle_gpus(
    prom_factory: Callable[..., LocalPrometheus], cluster_data: list[Series]
) -> None:
    """Zombie and idle alerts fire for the held idle GPUs of the dcgm-exporter variants, no others."""
    prom = prom_factory(cluster_data, name="rules")
    # Restart it with the rule file: promtool's blocks are in place, the rules are evaluated live.
    prom.stop()
    prom.rule_files = [RULES]
    prom.start()
    want = {"GPU-a1", "GPU-b1", "GPU-c1", "GPU-g1", "GPU-m1", "GPU-m2", "GPU-f0/1"}
    got: dict[str, set[str]] = {}
    deadline = time.monotonic() + 90  # hang guard: rules evaluate every 15 s
    while time.monotonic() < deadline:
        alerts = httpx.get(f"{prom.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        got = {}
        for a in alerts:
            lab = a["labels"]
            uuid = lab.get("UUID") or lab.get("uuid", "")
            key = f"{uuid}/{lab['GPU_I_ID']}" if lab.get("GPU_I_ID") else uuid
            got.setdefault(lab["alertname"], set()).add(key)
        if got.get("GpuStewardZombieGpu") == want and got.get("GpuStewardIdleGpu") == want:
            break
        time.sleep(1)
    assert got.get("GpuStewardZombieGpu") == want
    assert got.get("GpuStewardIdleGpu") == want


def _allowed_metric_names() -> set[str]:
    names: set[str] = set()
    for f in ("dcgm_default-counters.csv", "dcgm_dcp-metrics-included.csv"):
        rows = (FIXTURES / f).read_text().splitlines()
        for row in csv.reader(r.lstrip("# ") for r in rows if r.strip()):
            if row and row[0].strip().startswith("DCGM_FI_"):
                names.add(row[0].strip())
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    for fam in StewardMetrics().registry.collect():
        names.update(fam.name + s for s in suffixes[fam.type])
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (not functions, keywords, labels or durations)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    out = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", text):
        name, call = m.group(1), m.group(2)
        if not call and name not in KEYWORDS:
            out.add(name)
    return out


def _exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def test_dashboard_uses_only_exported_metrics() -> None:
    exprs = _exprs()
    assert len(exprs) >= 10
    allowed = _allowed_metric_names()
    used = set().union(*(metric_names(e) for e in exprs))
    assert used - allowed == set()
    # it shows what the issue asks for
    for name in ("DCGM_FI_DEV_GPU_UTIL", "gpusteward_idle_gpus", "gpusteward_waste_cost_per_hour",
                 "gpusteward_actions_total", "gpusteward_saved_cost_total", "gpusteward_gpu_health",
                 "gpusteward_jobs_waiting", "gpusteward_gpus_waited_for",
                 "gpusteward_queue_time_seconds"):  # fmt: skip
        assert name in used


def test_metric_name_extraction() -> None:
    assert metric_names('sum by (le) (rate(x_bucket{a="b"}[5m]))') == {"x_bucket"}
    assert metric_names("avg(a or b * 100) > bool 3") == {"a", "b"}


def test_dashboard_expressions_run_on_prometheus(cluster_prom: LocalPrometheus, end_s: float) -> None:
    for expr in _exprs():
        resp = httpx.post(
            f"{cluster_prom.url}/api/v1/query", data={"query": expr, "time": str(end_s)}, timeout=10
        )
        assert resp.json()["status"] == "success", (expr, resp.text)
