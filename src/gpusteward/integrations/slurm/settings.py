"""The ``source.slurm`` config section."""

from __future__ import annotations

import signal as _signal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def normalise_signal(value: str) -> str:
    """``usr1``, ``SIGUSR1`` and ``10`` → the name scancel takes (``USR1``); ValueError otherwise."""
    text = str(value).strip().upper()
    if text.isdigit():
        try:
            return _signal.Signals(int(text)).name.removeprefix("SIG")
        except ValueError as e:
            raise ValueError(f"unknown signal number {value!r}") from e
    name = text if text.startswith("SIG") else f"SIG{text}"
    if name not in _signal.Signals.__members__:
        raise ValueError(f"unknown signal {value!r} (e.g. USR1, USR2, TERM, INT)")
    return name.removeprefix("SIG")


class SlurmContactSettings(_Section):
    """How a job owner's user name becomes an e-mail address; rules are tried in this order."""

    map_file: Path | None = Field(
        None, description="YAML `user: address` (or `user address` lines); relative to the working directory."
    )
    gecos: bool = Field(False, description="Use an address found in the GECOS field of `getent passwd USER`.")
    domain: str = Field("", description="Otherwise USER@domain (e.g. example.edu); empty: no address.")


class SlurmProtectSettings(_Section):
    """Slurm-side protections (users and accounts: policy.protect.users / policy.protect.teams)."""

    partitions: list[str] = Field(
        default_factory=list, description="Jobs in these partitions are never acted on."
    )
    qos: list[str] = Field(default_factory=list, description="Jobs with these QOS are never acted on.")
    comment_tag: str = Field(
        "gpusteward:protect",
        description="A job whose comment (sbatch --comment) contains this word is never acted on. "
        "`gpusteward:exclude-until=<RFC 3339 time>` in a comment excludes it until then.",
    )


class SlurmAdviceSettings(_Section):
    """Time-limit advice from the owner's finished jobs (`gpusteward slurm advice`)."""

    history_days: float = Field(30, gt=0, le=3660, description="How far back sacct looks for finished jobs.")
    min_jobs: int = Field(
        5, ge=1, le=1_000_000, description="Finished jobs a user needs before advice is given."
    )
    limit_factor: float = Field(
        3.0,
        gt=1,
        le=1000,
        description="Advise when the time limit exceeds this multiple of the user's p90 runtime.",
    )
    min_limit_minutes: float = Field(
        120, ge=0, le=525_600, description="No advice on time limits shorter than this."
    )


class SlurmQueueSettings(_Section):
    """Pending jobs and queue times (start - submit of recently started jobs)."""

    enabled: bool = Field(True, description="Read pending jobs each tick (one more squeue call).")
    lookback_seconds: float = Field(
        3600, gt=0, le=30 * 86400, description="Queue times come from jobs started this far back."
    )
    starts_from: Literal["auto", "sacct", "squeue"] = Field(
        "auto",
        description="Where start times come from: sacct (every start, needs accounting), squeue "
        "(running jobs only), auto: sacct where accounting exists, else squeue.",
    )


class SlurmSourceSettings(_Section):
    """Jobs from Slurm, GPU metrics from another source, joined by node and GPU index."""

    metrics: str = Field(
        "prometheus",
        description="The source that measures the GPUs (nvml on one node, prometheus for a cluster); "
        "its GPUs are matched to jobs by node name and Slurm's GPU index (IDX).",
    )
    slurm_conf: Path | None = Field(None, description="SLURM_CONF for every command; default: Slurm's own.")
    bin_dir: Path | None = Field(None, description="Directory holding squeue, scontrol, scancel, sacct.")
    binaries: dict[str, str] = Field(
        default_factory=dict,
        description="Per command, a path or name: squeue, scontrol, scancel, sacct, getent.",
    )
    command_timeout_seconds: float = Field(
        30, gt=0, le=3600, description="Longest wait for one Slurm command."
    )
    format: Literal["auto", "json", "text"] = Field(
        "auto", description="auto: squeue --json, or scontrol's text where this Slurm has no JSON."
    )
    controller_timezone: str = Field(
        "", description="IANA zone of the times scontrol prints (text format); empty: this machine's."
    )
    cluster: str = Field(
        "", description="Cluster name in workload ids; empty: the one squeue --json reports (text has none)."
    )
    node_names: dict[str, str] = Field(
        default_factory=dict,
        description="Slurm node name → the node name the metric source reports, where they differ "
        "(short and fully qualified names are matched without this).",
    )
    checkpoint_signal: str = Field("USR1", description="Signal sent first on a graceful stop.")
    signal_by_account: dict[str, str] = Field(
        default_factory=dict, description="Per account, another signal."
    )
    signal_by_partition: dict[str, str] = Field(
        default_factory=dict, description="Per partition, another signal (wins over the account's)."
    )
    force: Literal["cancel", "requeue"] = Field(
        "cancel", description="L3: scancel --full, or scontrol requeue for jobs that allow requeueing."
    )
    grace_poll_seconds: float = Field(
        2,
        ge=0.1,
        le=600,
        description="How often a graceful stop checks whether the job has ended during its grace.",
    )
    protect: SlurmProtectSettings = Field(default_factory=SlurmProtectSettings)
    contact: SlurmContactSettings = Field(default_factory=SlurmContactSettings)
    advice: SlurmAdviceSettings = Field(default_factory=SlurmAdviceSettings)
    queue: SlurmQueueSettings = Field(default_factory=SlurmQueueSettings)

    @field_validator("checkpoint_signal")
    @classmethod
    def _signal(cls, v: str) -> str:
        return normalise_signal(v)

    @field_validator("signal_by_account", "signal_by_partition")
    @classmethod
    def _signals(cls, v: dict[str, str]) -> dict[str, str]:
        return {k: normalise_signal(s) for k, s in v.items()}

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: str) -> str:
        if v in ("sim", "slurm"):
            raise ValueError(f"{v!r} cannot measure a Slurm cluster's GPUs; use nvml or prometheus")
        return v

    @field_validator("binaries")
    @classmethod
    def _tools(cls, v: dict[str, str]) -> dict[str, str]:
        known = ("squeue", "scontrol", "scancel", "sacct", "getent")
        unknown = sorted(set(v) - set(known))
        if unknown:
            raise ValueError(f"unknown command(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return v
