"""The client, the executor and the CLI against the real test controller."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.domain.errors import SourceError, SourceUnavailable
from gpusteward.domain.models import Decision, Level, Workload
from gpusteward.integrations.slurm import SlurmClient, SlurmJobControl, SlurmRunner, SlurmSource
from gpusteward.integrations.slurm.executor import SlurmExecutor

ENDED = {"COMPLETED", "CANCELLED", "FAILED", "GONE", "TIMEOUT"}


def client_for(slurm, fmt="json", **runner) -> SlurmClient:
    return SlurmClient(SlurmRunner(slurm_conf=slurm.conf, timeout_s=20, **runner), format=fmt)


def test_json_and_text_read_the_same_jobs(slurm, cleanup_jobs):
    two = slurm.sbatch("sleep 600\n", "--gres=gpu:2", "--job-name=two", "--time=45", "--comment=train run 7")
    arr = slurm.sbatch("sleep 600\n", "--gres=gpu:1", "--array=0-1", "--job-name=arr", "--partition=gpu")
    cleanup_jobs += [two, arr]
    slurm.wait(two, {"RUNNING"})
    slurm.wait(f"{arr}_1", {"RUNNING"})

    views = {fmt: client_for(slurm, fmt).jobs() for fmt in ("json", "text")}
    jview, jproblems = views["json"]
    tview, tproblems = views["text"]
    assert jproblems == tproblems == []
    assert jview.format == "json"
    assert jview.version.startswith("22.05")
    assert jview.cluster in ("", "gst")
    by_json = {j.display_id: j for j in jview.jobs if j.running}
    by_text = {j.display_id: j for j in tview.jobs if j.running}
    assert set(by_json) == set(by_text) == {two, f"{arr}_0", f"{arr}_1"}
    for display, j in by_json.items():
        t = by_text[display]
        # The text fallback agrees with JSON on everything gpusteward uses (scontrol has no cluster name).
        for attr in ("job_id", "user", "partition", "states", "started_at", "time_limit_minutes", "nodes"):
            assert getattr(j, attr) == getattr(t, attr), (display, attr)
        assert j.gpu_indices == t.gpu_indices
        assert sorted(j.gpu_indices[slurm.node]) == sorted(slurm.gpu_indices(j.job_id))
    assert by_json[two].gpu_count == 2
    assert by_json[two].comment == "train run 7"
    assert by_json[two].time_limit_minutes == 45
    assert by_json[f"{arr}_1"].partition == "gpu"
    # All four GPUs are taken, each by exactly one job.
    slots = sorted(s for j in by_json.values() for s in j.gpu_slots)
    assert slots == [(slurm.node, i) for i in range(4)]


def test_one_job_and_gone_jobs(slurm, cleanup_jobs):
    job = slurm.sbatch("sleep 600\n", "--gres=gpu:1")
    cleanup_jobs.append(job)
    slurm.wait(job, {"RUNNING"})
    for fmt in ("json", "text"):
        client = client_for(slurm, fmt)
        got = client.job(job)
        assert got is not None
        assert got.running
        assert got.job_id == job
        assert client.job("999999") is None
        assert client.signal("999999", "USR1") is False
    client = client_for(slurm)
    assert client.cancel(job) is True
    slurm.wait(job, ENDED)
    gone = client.job(job)
    assert gone is None or not gone.running


def _fake_squeue_without_json(tmp_path):
    """An squeue from before --json: what auto-detection must fall back from."""
    script = tmp_path / "squeue"
    script.write_text("#!/bin/sh\necho \"squeue: unrecognized option '--json'\" >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_auto_falls_back_to_text_where_squeue_has_no_json(slurm, tmp_path, cleanup_jobs):
    job = slurm.sbatch("sleep 600\n", "--gres=gpu:1")
    cleanup_jobs.append(job)
    slurm.wait(job, {"RUNNING"})
    client = client_for(slurm, "auto", binaries={"squeue": _fake_squeue_without_json(tmp_path)})
    view, _ = client.jobs()
    assert client.format == "text"
    assert view.format == "text"
    assert job in {j.job_id for j in view.jobs if j.running}
    # Strict JSON does not fall back: the failure is the answer.
    strict = client_for(slurm, "json", binaries={"squeue": _fake_squeue_without_json(tmp_path)})
    with pytest.raises(SourceError, match="unrecognized option"):
        strict.jobs()


def test_dead_port_times_out_and_missing_binaries_are_named(slurm, tmp_path):
    conf = tmp_path / "slurm.conf"
    text = slurm.conf.read_text()
    conf.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", text))
    (tmp_path / "gres.conf").write_text((slurm.conf.parent / "gres.conf").read_text())
    dead = SlurmClient(SlurmRunner(slurm_conf=conf, timeout_s=1.5), format="json")
    with pytest.raises(SourceError, match=r"timed out after 1\.5 s"):
        dead.jobs()
    nothing = SlurmClient(SlurmRunner(slurm_conf=slurm.conf, env={"PATH": str(tmp_path)}))
    with pytest.raises(SourceUnavailable, match="'squeue' not found"):
        nothing.jobs()


class _NoMetrics:
    name = "none"

    def observe(self, now):
        raise SourceError("unused")

    def close(self):
        pass


def _workload(source: SlurmSource, client: SlurmClient, job_id: str) -> Workload:
    job = client.job(job_id)
    assert job is not None
    return source.workload_of(job)[0]


def test_executor_signal_by_partition_force_and_requeue(slurm, tmp_path, cleanup_jobs):
    usr2 = tmp_path / "usr2.flag"
    trap = f"trap 'echo got > {usr2}; exit 0' USR2\nwhile true; do sleep 1; done\n"
    a = slurm.sbatch(trap, "--gres=gpu:1", "--partition=gpu")
    b = slurm.sbatch("sleep 600\n", "--gres=gpu:1", "--requeue")
    c = slurm.sbatch("sleep 600\n", "--gres=gpu:1", "--no-requeue")
    cleanup_jobs += [a, b, c]
    for job in (a, b, c):
        slurm.wait(job, {"RUNNING"})
    client = client_for(slurm)
    source = SlurmSource(client, _NoMetrics())
    ex = SlurmExecutor(
        SlurmJobControl(source, client),
        signal_by_partition={"gpu": "USR2"},
        grace_s=15,
        poll_s=0.2,
        force="requeue",
    )

    def decision(w: Workload, level: Level) -> Decision:
        return Decision(w.id, datetime.now(tz=UTC), level, "step", "test", gpu_uuids=w.gpu_uuids)

    wa = _workload(source, client, a)
    assert ex.supports(wa, Level.GRACEFUL_STOP)
    assert not ex.supports(wa, Level.NOTIFY)
    out = ex.execute(decision(wa, Level.GRACEFUL_STOP), wa)
    assert out.ok
    assert out.verified
    assert "SIGUSR2" in out.detail
    assert usr2.read_text().strip() == "got"
    assert slurm.wait(a, ENDED) == "COMPLETED"

    wb = _workload(source, client, b)
    out = ex.execute(decision(wb, Level.FORCE), wb)
    assert "requeued" in out.detail
    assert slurm.wait(b, {"PENDING", "REQUEUED", "REQUEUE_HOLD", "RUNNING"})
    assert ex.verify(decision(wb, Level.FORCE), wb), "the requeued job is another incarnation"

    wc = _workload(source, client, c)
    out = ex.execute(decision(wc, Level.FORCE), wc)
    assert "cancelled" in out.detail, "a job that refuses requeueing is cancelled"
    assert slurm.wait(c, ENDED) == "CANCELLED"
    # Again on a job that is gone: nothing to do, and it says so.
    again = ex.execute(decision(wc, Level.FORCE), wc)
    assert again.ok
    assert again.verified
    assert "already ended" in again.detail


def test_two_phase_graceful_stop_on_real_jobs(slurm, tmp_path, cleanup_jobs):
    """``begin`` signals and returns at once; ``complete`` cancels a job still running after the
    grace, and leaves alone one that saved and ended within it."""
    saved, noted = tmp_path / "saved.flag", tmp_path / "noted.flag"
    saver = f"trap 'echo got > {saved}; exit 0' USR1\nwhile true; do sleep 1; done\n"
    slow = f"trap 'echo got > {noted}' USR1\nwhile true; do sleep 1; done\n"
    a = slurm.sbatch(saver, "--gres=gpu:1")
    b = slurm.sbatch(slow, "--gres=gpu:1")
    cleanup_jobs += [a, b]
    for job in (a, b):
        slurm.wait(job, {"RUNNING"})
    client = client_for(slurm)
    source = SlurmSource(client, _NoMetrics())
    ex = SlurmExecutor(SlurmJobControl(source, client), grace_s=600, poll_s=0.2)
    wa, wb = _workload(source, client, a), _workload(source, client, b)
    stop = Level.GRACEFUL_STOP
    for w in (wa, wb):
        out = ex.begin(Decision(w.id, datetime.now(tz=UTC), stop, "graceful-stop", "test"), w)
        assert (out.ok, out.verified, out.follow_up_after_s) == (True, False, 600)
    assert slurm.wait(a, ENDED) == "COMPLETED"  # it saved and ended within its grace
    assert saved.read_text().strip() == "got"
    for _ in range(200):  # a hang guard: the trap runs once the loop's sleep returns
        if noted.exists():
            break
        time.sleep(0.05)
    assert noted.read_text().strip() == "got"
    assert client.job(b) is not None  # still running: the grace is not waited out here

    done_a = ex.complete(Decision(wa.id, datetime.now(tz=UTC), stop, "graceful-stop", "test"), wa)
    assert done_a.verified
    assert "ended within the grace" in done_a.detail
    done_b = ex.complete(Decision(wb.id, datetime.now(tz=UTC), stop, "graceful-stop", "test"), wb)
    assert "scancel" in done_b.detail
    assert slurm.wait(b, ENDED) == "CANCELLED"
    assert ex.verify(Decision(wb.id, datetime.now(tz=UTC), stop, "graceful-stop", "test"), wb)


def test_cli_slurm_jobs(slurm, tmp_path, cleanup_jobs):
    job = slurm.sbatch("sleep 600\n", "--gres=gpu:2", "--comment=gpusteward:protect")
    cleanup_jobs.append(job)
    slurm.wait(job, {"RUNNING"})
    config = tmp_path / "gpusteward.yaml"
    config.write_text(
        "source:\n  name: slurm\n  slurm:\n"
        f"    slurm_conf: {slurm.conf}\n    contact:\n      domain: example.org\n"
    )
    result = CliRunner().invoke(
        app, ["slurm", "jobs", "--config", str(config), "--json"], env=dict(os.environ)
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (row,) = [r for r in data["jobs"] if r["job_id"] == job]
    assert row["contact"] == "root@example.org"
    assert row["protected"] == "job comment has gpusteward:protect"
    assert sorted(row["gpus"]) == sorted(f"{slurm.node}/gpu{i}" for i in slurm.gpu_indices(job))
    # No accounting storage on the test cluster: advice fails with sacct's own words.
    result = CliRunner().invoke(app, ["slurm", "advice", "--config", str(config)])
    assert result.exit_code == 1
    assert "accounting storage is disabled" in result.output
