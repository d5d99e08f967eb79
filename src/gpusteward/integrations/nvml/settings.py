"""Settings of the ``nvml`` source and the local process executor (``source.nvml`` in the config)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class NvmlSourceSettings(BaseModel):
    """One node's GPUs through NVML, its processes through /proc, and how they are stopped."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    proc_root: Path = Field(
        Path("/proc"),
        description="Where the host's /proc is (mount it, e.g. at /host/proc, when the agent runs in a "
        "container; it then needs the host PID namespace too).",
    )
    node: str = Field("", description="Node name in workload ids and metrics; empty: this host's name.")
    teams: dict[str, str] = Field(
        default_factory=dict,
        description="User name → team. Without an entry the team is the pod's namespace, else the "
        "Slurm account, else the process's GPUSTEWARD_TEAM, else empty.",
    )
    protected_users: list[str] = Field(
        default_factory=list,
        description="Users whose processes are never signalled (in addition to policy.protect.users).",
    )
    allow_root: bool = Field(False, description="Allow stopping processes owned by root (UID 0).")
    graphics_processes: bool = Field(
        False,
        description="Treat processes holding a GPU only for graphics (Xorg, a desktop) as workloads too; "
        "they are always exported as metrics.",
    )
    process_utilization: bool = Field(
        True, description="Read per-process SM and memory utilisation where the driver supports it."
    )
    checkpoint_signal: str = Field(
        "",
        description="Signal sent at L2 before SIGTERM (e.g. SIGUSR1) when a workload names none in its "
        "gpusteward.io/checkpoint-signal annotation or GPUSTEWARD_CHECKPOINT_SIGNAL; empty: none.",
    )
    term_wait_seconds: float = Field(
        10.0, ge=0, le=3600, description="After SIGTERM (L2), how long to wait for the process to exit."
    )
    kill_wait_seconds: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="After SIGKILL (L3), how long to wait for it to exit and free GPU memory.",
    )
    poll_seconds: float = Field(
        0.2, ge=0.01, le=60, description="How often the executor re-checks while it waits."
    )
    write_burst_bytes_per_second: float = Field(
        50 * 1024 * 1024,
        gt=0,
        le=2**50,
        description="A holding process writing faster than this is saving a checkpoint, not idle: it is "
        "excluded from action for checkpoint_exclude_minutes.",
    )
    checkpoint_exclude_minutes: float = Field(
        10.0, ge=0, le=10080, description="How long a write burst keeps a process from being acted on."
    )
    flag_dir: Path | None = Field(
        None,
        description="Where an L4 step flags this server (a failed GPU's drain, a park): a file named "
        "after the node, for a login banner, job wrapper or health check to honour. Empty: the "
        "server is never flagged and a failed GPU is only reported.",
    )
