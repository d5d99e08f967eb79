"""The command runner with small stand-in executables: every failure is a SourceError that says what."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpusteward.domain.errors import SourceError, SourceUnavailable
from gpusteward.integrations.slurm import SlurmClient, SlurmCommandFailed, SlurmRunner


def tool(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_argv_env_and_bin_dir(tmp_path):
    tool(tmp_path, "squeue", 'echo "$SLURM_CONF|$*"\n')
    runner = SlurmRunner(bin_dir=tmp_path, slurm_conf=Path("/etc/x/slurm.conf"), env={"PATH": "/nonexistent"})
    # Arguments travel as a list: nothing is split or expanded by a shell.
    out = runner.run("squeue", "--json", "a b;c", "$HOME")
    assert out.stdout == "/etc/x/slurm.conf|--json a b;c $HOME\n"


def test_a_configured_path_wins(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    path = tool(other, "my-squeue", "echo custom\n")
    runner = SlurmRunner(binaries={"squeue": str(path)}, env={"PATH": str(tmp_path)})
    assert runner.run("squeue").stdout == "custom\n"


def test_missing_binary(tmp_path):
    runner = SlurmRunner(env={"PATH": str(tmp_path)})
    with pytest.raises(SourceUnavailable, match=r"squeue: 'squeue' not found on PATH.*binaries\.squeue"):
        runner.run("squeue", "--json")
    with pytest.raises(SourceUnavailable, match="not an executable"):
        SlurmRunner(binaries={"scancel": str(tmp_path / "nope")}).run("scancel", "1")


def test_non_zero_exit_keeps_code_and_stderr(tmp_path):
    tool(
        tmp_path, "scontrol", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    runner = SlurmRunner(bin_dir=tmp_path)
    with pytest.raises(SlurmCommandFailed, match="scontrol show job exited 1: slurm_load_jobs error") as err:
        runner.run("scontrol", "show", "job")
    assert err.value.rc == 1
    assert "Unable to contact" in err.value.stderr
    assert isinstance(err.value, SourceError)


def test_timeout_kills_and_says_so(tmp_path):
    tool(tmp_path, "squeue", "sleep 30\n")
    runner = SlurmRunner(bin_dir=tmp_path, timeout_s=0.3)
    with pytest.raises(SourceError, match=r"squeue --json timed out after 0\.3 s"):
        runner.run("squeue", "--json")


def test_client_errors_name_the_command(tmp_path):
    tool(tmp_path, "squeue", "echo 'not json at all'\n")
    client = SlurmClient(SlurmRunner(bin_dir=tmp_path), format="json")
    with pytest.raises(SourceError, match="squeue --json: not JSON"):
        client.jobs()


def test_client_treats_invalid_job_id_as_gone(tmp_path):
    tool(
        tmp_path,
        "scancel",
        "echo 'scancel: error: Kill job error on job id 9: Invalid job id specified' >&2\nexit 1\n",
    )
    tool(tmp_path, "scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    client = SlurmClient(SlurmRunner(bin_dir=tmp_path), format="text")
    assert client.cancel("9") is False
    assert client.signal("9", "USR1") is False
    assert client.job("9") is None


def test_client_does_not_fall_back_when_the_controller_is_down(tmp_path):
    tool(tmp_path, "squeue", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
    tool(tmp_path, "scontrol", "echo 'JobId=1 JobState=RUNNING'\n")
    client = SlurmClient(SlurmRunner(bin_dir=tmp_path), format="auto")
    with pytest.raises(SourceError, match="Unable to contact"):
        client.jobs()
    assert client.format == "auto"


def test_passwd_lookup(tmp_path):
    tool(
        tmp_path,
        "getent",
        '[ "$2" = alice ] && echo "alice:x:1001:1001:Alice,,,alice@uni.edu:/home/alice:/bin/sh" || exit 2\n',
    )
    client = SlurmClient(SlurmRunner(bin_dir=tmp_path))
    assert client.passwd("alice") == "alice:x:1001:1001:Alice,,,alice@uni.edu:/home/alice:/bin/sh"
    assert client.passwd("nobody-here") is None
