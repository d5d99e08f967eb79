"""Container, pod and Slurm job from ``/proc/<pid>/cgroup``: table-driven over the fixtures."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gpusteward.integrations.nvml.cgroup import CgroupInfo, parse_cgroup, parse_cgroup_path

CGROUPS = Path(__file__).resolve().parents[2] / "fixtures" / "cgroup"


def sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


CASES = {
    "docker-v1-cgroupfs": ("docker", sha("docker-v1"), "", "", ""),
    "docker-v2-systemd": ("docker", sha("docker-v2"), "", "", ""),
    "k8s-containerd-v2-burstable": (
        "containerd",
        sha("containerd-burstable"),
        "6e7520b1-f6e3-45bd-8673-1d64d102fedf",
        "burstable",
        "",
    ),
    "k8s-crio-v2-besteffort": (
        "cri-o",
        sha("crio-besteffort"),
        "0b7632a2-a56e-4278-987a-22de18008dbe",
        "besteffort",
        "",
    ),
    "k8s-containerd-v2-guaranteed": (
        "containerd",
        sha("containerd-guaranteed"),
        "d80f4a0e-576f-47a8-a0cf-69dc23dc1980",
        "guaranteed",
        "",
    ),
    "k8s-cgroupfs-v1-besteffort": (
        "cri",
        sha("cgroupfs-besteffort"),
        "74c13223-5a00-11e9-b385-42010a80018d",
        "besteffort",
        "",
    ),
    "k8s-cgroupfs-v1-guaranteed": (
        "cri",
        sha("cgroupfs-guaranteed"),
        "3f1c9a5e-2b7d-4c8e-9f01-23456789abcd",
        "guaranteed",
        "",
    ),
    "k8s-crio-v2-burstable-nested": (
        "cri-o",
        sha("crio-ctr"),
        "1c178021-5860-4495-a1ab-f9ac17877672",
        "burstable",
        "",
    ),
    "k8s-crio-v2-conmon": ("", "", "0b7632a2-a56e-4278-987a-22de18008dbe", "besteffort", ""),
    "k8s-containerd-v2-colon-form": (
        "containerd",
        sha("containerd-colon"),
        "099b88fb-2a99-45ad-af94-d91eb81a87e9",
        "burstable",
        "",
    ),
    "podman-v2-rootless": ("podman", sha("podman"), "", "", ""),
    "slurm-v1-task": ("", "", "", "", "4242"),
    "slurm-v2-batch": ("", "", "", "", "4243"),
    "host-user-session-v2": ("", "", "", "", ""),
    "this-machine-v1-hybrid": ("", "", "", "", ""),
}


def test_every_fixture_has_a_case() -> None:
    assert {p.stem for p in CGROUPS.glob("*.cgroup")} == set(CASES)


@pytest.mark.parametrize(("name", "want"), sorted(CASES.items()))
def test_fixture(name: str, want: tuple[str, str, str, str, str]) -> None:
    info = parse_cgroup((CGROUPS / f"{name}.cgroup").read_text())
    assert (info.runtime, info.container_id, info.pod_uid, info.qos, info.slurm_job) == want
    if info.container_id:
        assert info.container_short == info.container_id[:12]


def test_slurm_step_and_uid() -> None:
    info = parse_cgroup((CGROUPS / "slurm-v1-task.cgroup").read_text())
    assert (info.slurm_uid, info.slurm_step) == ("1000", "0")
    assert info.path == "/slurm/uid_1000/job_4242/step_0/task_0"  # v1 memory path over the v2 service
    assert parse_cgroup((CGROUPS / "slurm-v2-batch.cgroup").read_text()).slurm_step == "batch"


def test_hybrid_host_prefers_the_v1_path_that_names_the_container() -> None:
    info = parse_cgroup((CGROUPS / "docker-v1-cgroupfs.cgroup").read_text())
    assert info.path.startswith("/docker/")


@pytest.mark.parametrize("text", ["", "garbage\n", "0::/\n"])
def test_nothing_known(text: str) -> None:
    assert parse_cgroup(text) == CgroupInfo(path="/")


def test_a_32_digit_id_is_not_a_container() -> None:
    assert parse_cgroup_path("/process_api/1c04e12eb1808f019a2c78c2fc459cc8").container_id == ""
