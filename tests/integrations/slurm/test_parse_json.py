"""squeue/scontrol --json of Slurm 21.08, 22.05, 23.11 and 25.11 (real outputs in tests/fixtures/slurm)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.slurm.parse_json import check_version, parse_jobs_json

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"


def load(name: str) -> str:
    return (FIXTURES / name).read_text()


def one(name: str):
    view, problems = parse_jobs_json(load(name))
    assert problems == []
    (job,) = view.jobs
    return view, job


# file, job id, state, nodes, node → GPU indices, GPU count, GPU type
CASES = [
    ("slurm-job-gpus-gres_25.11.json", "5602", "RUNNING", ("gpu1",), {"gpu1": (0, 1, 2, 3)}, 4, "h100"),
    (
        "slurm-job-gpus-multi-nodes_25.11.json",
        "5679",
        "RUNNING",
        ("gpu1", "gpu2"),
        {"gpu1": (0, 1, 2, 3), "gpu2": (0, 1, 2, 3)},
        8,
        "h100",
    ),
    (
        "slurm-job-gpus-per-node_25.11.json",
        "5680",
        "RUNNING",
        ("gpu1", "gpu2"),
        {"gpu1": (0,), "gpu2": (0,)},
        2,
        "h100",
    ),
    ("slurm-job-gpus-per-socket_25.11.json", "5682", "RUNNING", ("gpu1",), {"gpu1": (0, 1)}, 2, "h100"),
    # --gpus-per-task=2 with 2 tasks: the allocation (gres_detail) says 4, not tres_per_task's 2.
    ("slurm-job-gpus-per-task_25.11.json", "5512", "RUNNING", ("gpu1",), {"gpu1": (0, 1, 2, 3)}, 4, "h100"),
    ("slurm-job-gpus-type_25.11.json", "5185", "RUNNING", ("gpu1",), {"gpu1": (0,)}, 1, "h100"),
    ("slurm-job-gpus-multi-types_25.11.json", "4716", "RUNNING", ("gpu1",), {"gpu1": (0,)}, 1, "h100"),
    # Pending: no nodes, no indices; the request (tres_per_job gres/gpu:4) still counts.
    ("slurm-job-gpus-pending_25.11.json", "4965", "PENDING", (), {}, 4, ""),
    ("slurm-job-running_25.11.json", "5748", "RUNNING", ("cn1",), {}, 0, ""),
    (
        "slurm-job-gpus-multi-nodes_23.11.json",
        "500",
        "RUNNING",
        ("ia1", "ia2"),
        {"ia1": (0, 1, 2, 3, 4, 5), "ia2": (0, 1, 2, 3, 4, 5)},
        12,
        "h100",
    ),
]


@pytest.mark.parametrize(("name", "job_id", "state", "nodes", "indices", "count", "gtype"), CASES)
def test_job_shapes(name, job_id, state, nodes, indices, count, gtype):
    _, job = one(name)
    assert job.job_id == job.display_id == job_id
    assert state in job.states
    assert job.nodes == nodes
    assert job.gpu_indices == indices
    assert job.gpu_count == count
    assert job.gpu_type == gtype
    assert job.running is (state == "RUNNING")
    assert (job.started_at is None) is (state == "PENDING")


def test_25_11_fields():
    view, job = one("slurm-job-gpus-gres_25.11.json")
    assert view.version == "25.11.0"
    assert view.cluster == "hpc" == job.cluster
    assert (job.user, job.account, job.partition, job.qos) == ("progers", "biology", "gpu", "normal")
    assert job.time_limit_minutes == 1
    assert job.started_at == datetime(2025, 11, 10, 14, 24, 32, tzinfo=UTC)
    assert job.requeue is True


def test_23_11_string_version_and_two_gpu_types_per_node():
    view, job = one("slurm-job-gpus-multi-nodes_23.11.json")
    assert view.version == "23.11.10"
    assert job.gpu_slots[:3] == [("ia1", 0), ("ia1", 1), ("ia1", 2)]
    assert len(job.gpu_slots) == 12


def test_22_05_real_test_cluster_with_array_tasks():
    view, problems = parse_jobs_json(load("squeue_22.05_gpus_array.json"))
    assert problems == []
    assert view.version == "22.05.8"
    jobs = {j.display_id: j for j in view.jobs}
    assert set(jobs) == {"1", "2_0", "2_1"}
    assert jobs["1"].gpu_indices == {"gst-node1": (0, 1)}
    assert jobs["1"].comment == "ckpt test"
    assert jobs["1"].time_limit_minutes == 90
    # An array task keeps its own Slurm job id (what scancel and squeue --jobs take).
    assert jobs["2_0"].job_id == "3"
    assert jobs["2_1"].job_id == "2"
    assert jobs["2_0"].gpu_indices == {"gst-node1": (2,)}
    assert jobs["2_1"].gpu_indices == {"gst-node1": (3,)}


def test_21_08_plain_numbers():
    view, problems = parse_jobs_json(load("squeue_21.08_rivosinc.json"))
    assert problems == []
    assert view.version == "21.08.5"
    running, pending = view.jobs
    assert running.running
    assert running.nodes == ("cs75",)
    assert running.time_limit_minutes == 30240
    assert running.started_at == datetime(2023, 5, 15, 1, 42, 1, tzinfo=UTC)
    assert running.gpu_count == 0
    assert not pending.running
    assert pending.started_at is None


def test_het_job_is_one_job():
    view, _ = parse_jobs_json(load("squeue_22.05_het_pending.json"))
    (het,) = [j for j in view.jobs if j.het_parts]
    assert het.job_id == het.display_id == "4"
    assert het.het_parts == ("4", "5")
    assert het.gpu_count == 3
    assert het.comment == "gpusteward:protect"


def test_running_het_job_joins_the_gpus_of_its_parts():
    payload = json.loads(load("squeue_22.05_het_pending.json"))
    parts = [j for j in payload["jobs"] if j["het_job_id"]]
    for part, (idx, count) in zip(parts, [("0", 1), ("1-2", 2)], strict=True):
        part.update(job_state="RUNNING", start_time=1796010600, nodes="gst-node1")
        part["gres_detail"] = [f"gpu:{count}(IDX:{idx})"]
    view, _ = parse_jobs_json(json.dumps(payload))
    (het,) = [j for j in view.jobs if j.het_parts]
    assert het.running
    assert het.gpu_indices == {"gst-node1": (0, 1, 2)}
    assert het.gpu_count == 3


def test_controller_down_is_an_error_not_an_empty_cluster():
    # Recorded: squeue --json exits 0 with this when slurmctld is down.
    with pytest.raises(SourceError, match="Failed while looking for jobs"):
        parse_jobs_json(load("squeue_22.05_controller_down.json"))


def test_invalid_job_id_error_means_no_such_job():
    payload = json.loads(load("squeue_22.05_controller_down.json"))
    payload["errors"] = [{"error": "Invalid job id specified", "error_number": 2017}]
    view, _ = parse_jobs_json(json.dumps(payload))
    assert view.jobs == ()


@pytest.mark.parametrize(
    ("meta", "ok"),
    [
        ({"Slurm": {"version": {"major": 21, "minor": 8, "micro": 5}, "release": "21.08.5"}}, True),
        ({"slurm": {"version": {"major": "25", "minor": "11", "micro": "0"}, "release": "25.11.0"}}, True),
        ({"slurm": {"version": {"major": "26", "minor": "05", "micro": "0"}, "release": "26.05.0"}}, False),
        ({"Slurm": {"version": {"major": 20, "minor": 11, "micro": 9}, "release": "20.11.9"}}, False),
        ({"plugin": {"data_parser": "data_parser/v0.0.42"}}, True),
        ({"plugin": {"data_parser": "data_parser/v0.0.45"}}, False),
        ({}, False),
        (None, False),
    ],
)
def test_versions(meta, ok):
    if ok:
        assert check_version(meta)
    else:
        with pytest.raises(SourceError, match="not supported"):
            check_version(meta)


def test_unknown_version_is_refused_with_a_way_out():
    payload = json.loads(load("slurm-job-gpus-gres_25.11.json"))
    payload["meta"]["slurm"]["version"]["major"] = "26"
    payload["meta"]["slurm"]["release"] = "26.05.0"
    with pytest.raises(SourceError, match=r"Slurm 26\.05\.0 .*not supported.*format: text"):
        parse_jobs_json(json.dumps(payload))


@pytest.mark.parametrize("text", ["", "squeue: error: something", "[]", '{"jobs": 3}'])
def test_garbage_is_an_error(text):
    with pytest.raises(SourceError, match="squeue --json"):
        parse_jobs_json(text)


def test_one_bad_job_does_not_hide_the_others():
    payload = json.loads(load("squeue_22.05_gpus_array.json"))
    payload["jobs"][0]["gres_detail"] = ["gpu:2(IDX:zero)"]
    del payload["jobs"][1]["job_id"]
    view, problems = parse_jobs_json(json.dumps(payload))
    assert [j.display_id for j in view.jobs] == ["2_1"]
    assert len(problems) == 2
    assert all("unreadable" in p for p in problems)
