"""Time-limit advice from sacct history; the source.slurm settings and their wiring."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import Owner, RuleAction, Workload, WorkloadKind
from gpusteward.integrations.sim import SimClock
from gpusteward.integrations.slurm import SacctRecord, parse_sacct, timelimit_advice, typical_runtimes
from gpusteward.integrations.slurm.build import build_slurm
from gpusteward.integrations.slurm.settings import normalise_signal
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import REGISTRY, build_context, build_integration

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"
NOW = datetime(2025, 3, 1, tzinfo=UTC)


def rec(user: str, minutes: float, state: str = "COMPLETED") -> SacctRecord:
    return SacctRecord("1", user, "acct", "gpu", state, minutes, 1440)


def running(user: str, limit_minutes: int | None) -> Workload:
    notes = {"slurm.time_limit_minutes": str(limit_minutes)} if limit_minutes is not None else {}
    return Workload(
        f"slurm:c:{user}", WorkloadKind.JOB, "j", Owner(user), 1, ("GPU-0",), NOW, annotations=notes
    )


def test_typical_runtimes_use_completed_jobs_only():
    stats = typical_runtimes([rec("a", m) for m in (10, 20, 30, 40, 300)] + [rec("a", 5000, "TIMEOUT")])
    assert stats["a"].jobs == 5
    assert stats["a"].median_minutes == 30
    assert stats["a"].p90_minutes == 300


def test_typical_runtimes_from_a_real_cluster():
    fields = [
        "JobID", "JobName", "User", "Partition", "NodeList", "NNodes", "NCPUS", "NTasks", "State", "Submit",
        "Start", "End", "Timelimit", "Elapsed",
    ]  # fmt: skip
    text = (FIXTURES / "sacct_habrok.txt").read_text()
    records, _ = parse_sacct(text, [*fields, *[f"x{i}" for i in range(23)]], "☃")
    stats = typical_runtimes(records)
    assert stats["user46"].jobs == 9
    assert 0 < stats["user46"].median_minutes <= stats["user46"].p90_minutes


def test_timelimit_advice():
    stats = typical_runtimes([rec("alice", m) for m in (50, 55, 60, 58, 62, 61)] + [rec("bob", 60)] * 2)
    findings = timelimit_advice(
        [running("alice", 3 * 1440), running("alice", 150), running("bob", 3 * 1440), running("carol", 9000)],
        stats,
        NOW,
        min_jobs=5,
    )
    (f,) = findings
    assert f.workload_id == "slurm:c:alice"
    assert f.action is RuleAction.ADVISE
    assert f.rule == "slurm-timelimit"
    assert f.evidence["time_limit_minutes"] == {"GPU-0": 4320.0}
    assert f.evidence["p90_runtime_minutes"] == {"GPU-0": 62.0}
    assert "3-00:00:00 is 70x" in f.message
    assert "--time=01:33:00" in f.message


def test_unlimited_time_gets_no_advice():
    stats = typical_runtimes([rec("alice", 60)] * 10)
    assert timelimit_advice([running("alice", None)], stats, NOW) == []


def test_settings_defaults_and_validation():
    s = load_settings(None).source.slurm
    assert s.metrics == "prometheus"
    assert s.checkpoint_signal == "USR1"
    assert s.protect.comment_tag == "gpusteward:protect"
    s = load_settings(
        None,
        source={
            "slurm": {"checkpoint_signal": "sigusr2", "signal_by_account": {"phys": "15"}, "force": "requeue"}
        },
    ).source.slurm
    assert s.checkpoint_signal == "USR2"
    assert s.signal_by_account == {"phys": "TERM"}
    for bad, words in [
        ({"checkpoint_signal": "USR9"}, "unknown signal"),
        ({"metrics": "sim"}, "cannot measure"),
        ({"binaries": {"srun": "/x"}}, "unknown command"),
        ({"force": "kill"}, "force"),
        ({"squeue_path": "/x"}, "squeue_path"),
    ]:
        with pytest.raises(ConfigError, match=words):
            load_settings(None, source={"slurm": bad})


@pytest.mark.parametrize(
    ("value", "name"), [("USR1", "USR1"), ("sigterm", "TERM"), (" int ", "INT"), ("12", "USR2")]
)
def test_normalise_signal(value, name):
    assert normalise_signal(value) == name


def test_an_unknown_metric_source_is_a_config_error():
    settings = load_settings(None, source={"name": "slurm", "slurm": {"metrics": "no-such-source"}})
    with pytest.raises(ConfigError, match=r"source\.slurm\.metrics: unknown metric source 'no-such-source'"):
        build_integration(settings, SimClock(NOW))


def test_wiring_builds_the_composite_from_the_registry(monkeypatch, tmp_path):
    from gpusteward.domain.models import Observation

    class M:
        name = "m"

        def observe(self, now):
            return Observation(now, (), (), ())

        def close(self):
            pass

    monkeypatch.setitem(REGISTRY, "m", lambda cfg, ctx: Integration(name="m", source=M()))
    settings = load_settings(
        None,
        source={"name": "slurm", "slurm": {"metrics": "m", "slurm_conf": str(tmp_path / "slurm.conf")}},
        policy={"ladder": {"stop_grace_seconds": 45}},
    )
    integration = build_integration(settings, SimClock(NOW))
    assert integration.source.name == "slurm"
    (executor,) = integration.executors
    assert executor.grace_s == 45
    assert integration.history(NOW, NOW, 60) == []
    parts = build_slurm(settings.source.slurm, build_context(settings, SimClock(NOW), metrics=M()))
    assert parts.runner.env["SLURM_CONF"] == str(tmp_path / "slurm.conf")
    mars = load_settings(None, source={"slurm": {"controller_timezone": "Mars/Olympus"}})
    with pytest.raises(ConfigError, match="controller_timezone"):
        build_slurm(mars.source.slurm, build_context(mars, SimClock(NOW), metrics=M()))
