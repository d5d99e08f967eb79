"""Slurm's queue from real squeue / scontrol / sacct outputs: pending GPU jobs and queue times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.slurm.commands import SlurmCommandFailed
from gpusteward.integrations.slurm.gres import array_task_count, pending_reason, tres_gpu_type
from gpusteward.integrations.slurm.model import JobView, SacctStart
from gpusteward.integrations.slurm.parse_json import parse_jobs_json
from gpusteward.integrations.slurm.parse_text import parse_sacct_starts, parse_scontrol_jobs
from gpusteward.integrations.slurm.queue import SlurmQueue, pending_jobs, running_waits

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"
# squeue_22.05_pending.json / scontrol_22.05_pending.txt: recorded on the test cluster (clock in
# UTC) with job 1 running on 3 of 4 GPUs, job 2 wanting 2 GPUs, array 3 (0-3%2) one GPU per task,
# job 4 behind a dependency on job 1.
RECORDED = datetime(2026, 12, 1, 16, 44, 38, tzinfo=UTC)


def json_view() -> JobView:
    view, problems = parse_jobs_json((FIXTURES / "squeue_22.05_pending.json").read_text())
    assert problems == []
    return view


def text_view() -> JobView:
    view, problems = parse_scontrol_jobs((FIXTURES / "scontrol_22.05_pending.txt").read_text(), UTC)
    assert problems == []
    return view


@pytest.mark.parametrize("view", [json_view, text_view], ids=["json", "text"])
def test_pending_jobs_of_a_real_queue(view) -> None:
    pending = {p.id: p for p in pending_jobs(view().jobs, RECORDED)}
    assert set(pending) == {"2", "3", "4"}
    assert (pending["2"].queue, pending["2"].gpus, pending["2"].reason) == ("debug", 2, "Resources")
    # Four tasks of one GPU, throttled to two at once.
    assert (pending["3"].queue, pending["3"].gpus) == ("gpu", 2)
    # JSON says Resources; scontrol prints the description, which means the same: no free node.
    assert pending["3"].reason in ("Resources", "Nodes_required")
    assert pending["3"].waits_for_gpus
    assert pending["4"].reason == "Dependency"
    assert not pending["4"].waits_for_gpus
    assert pending["2"].submitted_at == datetime(2026, 12, 1, 16, 44, 35, tzinfo=UTC)
    assert {p.user for p in pending.values()} == {"root"}
    assert {p.gpu_model for p in pending.values()} == {""}  # the test cluster's gres is untyped


@pytest.mark.parametrize("view", [json_view, text_view], ids=["json", "text"])
def test_running_jobs_give_queue_times(view) -> None:
    waits = running_waits(view().jobs, RECORDED - timedelta(hours=1))
    # Job 1: submitted 16:44:33, started 16:44:35.
    assert [(w.id, w.queue, w.waited_s, w.gpus) for w in waits] == [("1", "gpu", 2.0, 3)]
    assert running_waits(view().jobs, RECORDED) == []  # started before the look-back


def test_het_pending_job_is_one_job_with_all_its_gpus() -> None:
    view, _ = parse_jobs_json((FIXTURES / "squeue_22.05_het_pending.json").read_text())
    now = datetime(2026, 12, 1, tzinfo=UTC)
    (job,) = pending_jobs(view.jobs, now)
    assert (job.id, job.gpus, job.reason) == ("4", 1 + 2, "Resources")
    assert job.submitted_at == datetime.fromtimestamp(1796010556, UTC)


def test_pending_job_waiting_for_its_begin_time_and_cpu_jobs() -> None:
    view, _ = parse_jobs_json((FIXTURES / "slurm-job-gpus-pending_25.11.json").read_text())
    (job,) = pending_jobs(view.jobs, RECORDED)
    assert (job.gpus, job.reason, job.user, job.queue) == (4, "BeginTime", "jwilson", "gpu")
    assert not job.waits_for_gpus
    # A pending CPU-only job (the rivosinc capture) is no GPU demand.
    view, _ = parse_jobs_json((FIXTURES / "squeue_21.08_rivosinc.json").read_text())
    assert pending_jobs(view.jobs, RECORDED) == []


@pytest.mark.parametrize(
    ("text", "model"),
    [
        ("gres/gpu:a100:2", "a100"),
        ("gres:gpu:h100:1", "h100"),
        ("cpu=8,gres/gpu:v100=1,gres/gpu=1,mem=10G", "v100"),
        ("gres/gpu:4", ""),
        ("gres/gpu=2", ""),
        ("gres/gpu:l40s", "l40s"),
        ("cpu=1,mem=1000M", ""),
        ("", ""),
    ],
)
def test_gpu_model_of_a_request(text: str, model: str) -> None:
    assert tres_gpu_type(text) == model


def test_typed_pending_request_names_its_model() -> None:
    # The het capture's job 5, asking for a typed GPU instead (a variant of a real job object).
    import json

    payload = json.loads((FIXTURES / "squeue_22.05_het_pending.json").read_text())
    raw = next(j for j in payload["jobs"] if j["job_id"] == 5)
    raw.update(het_job_id=0, tres_per_node="gres:gpu:a100:2", node_count=2)
    payload["jobs"] = [raw]
    view, _ = parse_jobs_json(json.dumps(payload))
    (job,) = pending_jobs(view.jobs, RECORDED)
    assert (job.gpu_model, job.gpus) == ("a100", 4)  # 2 per node, 2 nodes


@pytest.mark.parametrize(
    ("text", "n"), [("0-3%2", 2), ("0-3", 4), ("1,5,7", 3), ("2-9%20", 8), ("", 1), ("x-y", 1)]
)
def test_array_task_count(text: str, n: int) -> None:
    assert array_task_count(text) == n


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Resources", "Resources"),
        ("(Priority)", "Priority"),
        ("ReqNodeNotAvail,_UnavailableNodes:cs[100-102]", "ReqNodeNotAvail"),
        ("(ReqNodeNotAvail, UnavailableNodes:cs[100,101,102])", "ReqNodeNotAvail"),
        (
            "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
            "Nodes_required",
        ),
        (
            "(Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions)",
            "Nodes_required",
        ),
        ("None", ""),
    ],
)
def test_pending_reason(text: str, reason: str) -> None:
    assert pending_reason(text) == reason


def test_sacct_starts_of_a_real_cluster() -> None:
    from tests.integrations.slurm.test_parse_text import HABROK_FIELDS

    text = (FIXTURES / "sacct_habrok.txt").read_text()
    starts, problems = parse_sacct_starts(text, UTC, HABROK_FIELDS, "☃")
    assert problems == []
    # Independently: allocation lines (no step suffix) that started (pending ones say Unknown).
    rows = [line.split("☃") for line in text.splitlines() if line]
    allocs = [r for r in rows if "." not in r[0] and r[10] not in ("None", "Unknown")]
    assert len(starts) == len(allocs) == 90
    first = next(s for s in starts if s.job_id == "8150389")
    assert first.partition == "gpulong"
    assert first.gpus == 2
    assert (first.started_at - first.submitted_at) == timedelta(hours=1, minutes=44, seconds=32)


class FakeReader:
    """Canned answers in place of the controller (the live tests use the real one)."""

    def __init__(self, view: JobView, starts: list[SacctStart] | Exception) -> None:
        self.view = view
        self._starts = starts
        self.sacct_calls = 0

    def queue_jobs(self) -> tuple[JobView, list[str]]:
        return self.view, []

    def starts(self, since: datetime, until: datetime) -> tuple[list[SacctStart], list[str]]:
        self.sacct_calls += 1
        if isinstance(self._starts, Exception):
            raise self._starts
        return self._starts, []


def test_queue_takes_sacct_starts_when_accounting_exists() -> None:
    t = RECORDED
    starts = [
        SacctStart("10", "gpu", t - timedelta(minutes=50), t - timedelta(minutes=30), 2),
        SacctStart("11", "gpu", t - timedelta(hours=3), t - timedelta(hours=2), 1),  # before the look-back
        SacctStart("12", "debug", t - timedelta(minutes=5), t - timedelta(minutes=4), 0),  # no GPU
    ]
    queue = SlurmQueue(FakeReader(json_view(), starts), lookback_s=3600)(t)
    assert [(w.id, w.waited_s) for w in queue.started] == [("10", 1200.0)]
    assert queue.gpus_waited_for() == 2 + 2  # job 2, and array 3's two tasks at once
    assert len(queue.pending) == 3


def test_auto_falls_back_to_running_jobs_for_good_without_accounting() -> None:
    disabled = SlurmCommandFailed(["sacct"], 1, "Slurm accounting storage is disabled")
    reader = FakeReader(json_view(), disabled)
    read = SlurmQueue(reader, lookback_s=3600)
    for _ in range(3):
        queue = read(RECORDED)
        assert [(w.id, w.waited_s) for w in queue.started] == [("1", 2.0)]
    assert reader.sacct_calls == 1
    assert read.starts_from == "squeue"


def test_sacct_asked_for_but_failing_keeps_the_pending_jobs() -> None:
    disabled = SlurmCommandFailed(["sacct"], 1, "Slurm accounting storage is disabled")
    read = SlurmQueue(FakeReader(json_view(), disabled), starts_from="sacct")
    queue = read(RECORDED)
    assert len(queue.pending) == 3
    assert any("sacct" in p for p in read.problems)


def test_unreadable_queue_is_a_clear_source_error() -> None:
    class Down:
        def queue_jobs(self) -> tuple[JobView, list[str]]:
            raise SourceError("squeue --json reported: Unable to contact slurm controller")

        def starts(self, since: datetime, until: datetime) -> tuple[list[SacctStart], list[str]]:
            raise AssertionError("not reached")

    with pytest.raises(SourceError, match=r"slurm queue: cannot read pending jobs: .*controller"):
        SlurmQueue(Down())(RECORDED)
