"""scontrol's one-line text (the fallback), sacct --parsable(2), Slurm durations."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone
from pathlib import Path

import pytest

from gpusteward.integrations.slurm.parse_json import parse_jobs_json
from gpusteward.integrations.slurm.parse_text import (
    parse_duration_minutes,
    parse_sacct,
    parse_scontrol_job,
    parse_scontrol_jobs,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"
HABROK_FIELDS = [
    "JobID",
    "JobName",
    "User",
    "Partition",
    "NodeList",
    "NNodes",
    "NCPUS",
    "NTasks",
    "State",
    "Submit",
    "Start",
    "End",
    "Timelimit",
    "Elapsed",
    "TotalCPU",
    "CPUTime",
    "UserCPU",
    "SystemCPU",
    "ReqMem",
    "MaxRSS",
    "MaxVMSize",
    "ReqTRES",
    "AllocTRES",
    "TRESUsageInMax",
    "TRESUsageInTot",
    "TRESUsageOutTot",
    "MaxDiskRead",
    "MaxDiskWrite",
    "MaxRSSNode",
    "MaxRSSTask",
    "MaxVMSizeNode",
    "MaxVMSizeTask",
    "MaxDiskReadNode",
    "MaxDiskReadTask",
    "MaxDiskWriteNode",
    "MaxDiskWriteTask",
    "Comment",
]


def test_text_fallback_agrees_with_json_of_the_same_moment():
    # Both recorded from the same test cluster, a second apart, on a machine running UTC.
    text, _ = parse_scontrol_jobs((FIXTURES / "scontrol_22.05_gpus_array.txt").read_text(), UTC)
    js, _ = parse_jobs_json((FIXTURES / "squeue_22.05_gpus_array.json").read_text())
    by_text = {j.display_id: j for j in text.jobs}
    by_json = {j.display_id: j for j in js.jobs}
    assert set(by_text) == set(by_json) == {"1", "2_0", "2_1"}
    for key, t in by_text.items():
        j = by_json[key]
        for attr in (
            "job_id",
            "name",
            "user",
            "partition",
            "states",
            "started_at",
            "time_limit_minutes",
            "nodes",
            "gpu_indices",
            "gpu_count",
            "comment",
            "requeue",
        ):
            assert getattr(t, attr) == getattr(j, attr), (key, attr)
    assert text.format == "text"


def test_times_are_read_in_the_controllers_zone():
    line = (FIXTURES / "scontrol_22.05_gpus_array.txt").read_text().splitlines()[0]
    utc, _ = parse_scontrol_job(line, UTC)
    east, _ = parse_scontrol_job(line, timezone(timedelta(hours=2)))
    assert utc.started_at is not None
    assert east.started_at is not None
    assert utc.started_at - east.started_at == timedelta(hours=2)


LINE = (
    "JobId=77 HetJobId=77 HetJobOffset=0 JobName=my job UserId=alice(1001) GroupId=g(1) Account=physics "
    "QOS=high JobState=RUNNING Reason=None Requeue=0 TimeLimit=2-00:00:00 StartTime=2025-01-02T03:04:05 "
    "Partition=a100 NodeList=gpu[1-2] TRES=cpu=2,gres/gpu=3,node=2 JOB_GRES=gpu:a100:3 "
    "Nodes=gpu1 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:0,2) Nodes=gpu2 CPU_IDs=0 Mem=0 GRES=gpu:a100:1(IDX:3) "
    "Comment=keep me gpusteward:exclude-until=2030-01-01T00:00:00Z please StdErr=/x StdIn=/dev/null"
)


def test_scontrol_line_fields():
    job, het = parse_scontrol_job(LINE, UTC)
    assert het == "77"
    assert (job.name, job.user, job.account, job.qos, job.partition) == (
        "my job",
        "alice",
        "physics",
        "high",
        "a100",
    )
    assert job.time_limit_minutes == 2 * 1440
    assert job.nodes == ("gpu1", "gpu2")
    assert job.gpu_indices == {"gpu1": (0, 2), "gpu2": (3,)}
    assert job.gpu_count == 3
    assert job.gpu_type == "a100"
    assert job.requeue is False
    # A comment keeps its spaces and a `key=value` word with a hyphen.
    assert job.comment == "keep me gpusteward:exclude-until=2030-01-01T00:00:00Z please"


def test_scontrol_groups_het_parts_and_skips_noise():
    part2 = "JobId=78" + LINE.removeprefix("JobId=77").replace("HetJobOffset=0", "HetJobOffset=1")
    view, problems = parse_scontrol_jobs("No jobs in the system\n" + LINE + "\n" + part2 + "\nJobId=x\n", UTC)
    (job,) = view.jobs
    assert job.job_id == "77"
    assert job.het_parts == ("77", "78")
    assert problems == ["slurm job line unreadable: no JobId in 'JobId=x'"]


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("30:00", 30),
        ("1:30:00", 90),
        ("2-00", 2880),
        ("2-12:00", 2880 + 720),
        ("2-12:00:30", 2880 + 720 + 0.5),
        ("00:00:30", 0.5),
        ("12:34.567", 12 + 34.567 / 60),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
        ("INVALID", None),
    ],
)
def test_durations(text, minutes):
    got = parse_duration_minutes(text)
    assert got == pytest.approx(minutes) if minutes is not None else got is None


def test_sacct_habrok_parsable_with_its_own_delimiter():
    records, problems = parse_sacct((FIXTURES / "sacct_habrok.txt").read_text(), HABROK_FIELDS, "☃")
    assert problems == []
    assert len(records) == 100
    assert not any("." in r.job_id for r in records)
    first = records[0]
    assert (first.job_id, first.user, first.partition, first.state) == (
        "4034541",
        "user424",
        "gpumedium",
        "CANCELLED",
    )
    assert first.elapsed_minutes == pytest.approx(3 * 60 + 34 + 13 / 60)
    assert first.time_limit_minutes == 19 * 60 + 50
    assert sum(r.state == "COMPLETED" for r in records) == 66


def test_sacct_parsable2_and_bad_lines():
    text = (
        "1|alice|phys|gpu|COMPLETED|01:00:00|02:00:00\n"
        "1.batch|||gpu|COMPLETED|01:00:00|\n"
        "2|bob|x|gpu|FAILED|xx|1\n"
        "3|a\n"
    )
    records, problems = parse_sacct(text)
    assert [r.job_id for r in records] == ["1"]
    assert records[0].account == "phys"
    assert len(problems) == 2


def test_sacct_needs_the_core_fields():
    with pytest.raises(ValueError, match="Elapsed"):
        parse_sacct("", ["JobID", "User", "State"])
