"""``source: slurm`` → runner, client, composite source (jobs joined with ``ctx.metrics``),
executor and node control; and the jobs and advice views of ``gpusteward slurm``.

The metric source is another integration (``source.slurm.metrics``) that the registry builds
and hands in; its own executors are not used: Slurm jobs are stopped through Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpusteward.domain.errors import ConfigError, SourceError
from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.domain.models import Finding, Observation, Workload
from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.integrations.slurm import (
    ContactResolver,
    SlurmClient,
    SlurmJobControl,
    SlurmRunner,
    SlurmSource,
    timelimit_advice,
    typical_runtimes,
)
from gpusteward.integrations.slurm.executor import SlurmExecutor
from gpusteward.integrations.slurm.node_control import SlurmNodeControl
from gpusteward.integrations.slurm.queue import SlurmQueue
from gpusteward.integrations.slurm.settings import SlurmSourceSettings
from gpusteward.integrations.slurm.source import PROTECT_REASON_KEY


@dataclass
class SlurmParts:
    runner: SlurmRunner
    client: SlurmClient
    source: SlurmSource
    executor: SlurmExecutor


def slurm_runner(cfg: SlurmSourceSettings) -> SlurmRunner:
    """The runner of Slurm's commands as ``source.slurm`` configures it (binaries, conf, timeout)."""
    return SlurmRunner(
        binaries=cfg.binaries,
        bin_dir=cfg.bin_dir,
        slurm_conf=cfg.slurm_conf,
        timeout_s=cfg.command_timeout_seconds,
    )


def build_slurm(
    cfg: SlurmSourceSettings, ctx: BuildContext, *, executor_clock: Clock | None = None
) -> SlurmParts:
    """Everything the Slurm source needs; its metrics come from ``ctx.metrics``."""
    if ctx.metrics is None:
        raise ConfigError("source.slurm: the slurm source needs a metric source (source.slurm.metrics)")
    runner = slurm_runner(cfg)
    tz = None
    if cfg.controller_timezone:
        try:
            tz = ZoneInfo(cfg.controller_timezone)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ConfigError(
                f"source.slurm.controller_timezone: unknown zone {cfg.controller_timezone!r}"
            ) from e
    client = SlurmClient(runner, format=cfg.format, tz=tz)
    contact = ContactResolver(
        domain=cfg.contact.domain,
        map_file=cfg.contact.map_file,
        gecos=cfg.contact.gecos,
        getent=client.passwd,
    )
    source = SlurmSource(
        client,
        ctx.metrics,
        name="slurm",
        cluster=cfg.cluster,
        node_names=cfg.node_names,
        protect_partitions=cfg.protect.partitions,
        protect_qos=cfg.protect.qos,
        comment_tag=cfg.protect.comment_tag,
        contact=contact,
    )
    executor = SlurmExecutor(
        SlurmJobControl(source, client),
        source=source.name,
        checkpoint_signal=cfg.checkpoint_signal,
        signal_by_account=cfg.signal_by_account,
        signal_by_partition=cfg.signal_by_partition,
        grace_s=ctx.stop_grace_s,
        poll_s=cfg.grace_poll_seconds,
        force=cfg.force,
        clock=executor_clock,
    )
    return SlurmParts(runner, client, source, executor)


def build(cfg: SlurmSourceSettings, ctx: BuildContext) -> Integration:
    parts = build_slurm(cfg, ctx)
    queue = (
        SlurmQueue(parts.client, lookback_s=cfg.queue.lookback_seconds, starts_from=cfg.queue.starts_from)
        if cfg.queue.enabled
        else None
    )
    return Integration(
        name="slurm",
        source=parts.source,
        executors=[parts.executor],
        node_control=SlurmNodeControl(parts.runner),
        queue=queue,
        parts=parts,
    )


class _NoMetrics:
    """Stands in for the metric source where only Slurm's view is wanted (the CLI's listings)."""

    name = "none"

    def observe(self, now: datetime) -> Observation:
        raise SourceError("no metric source: this view reads Slurm only")

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True)
class JobRow:
    """One running job as `gpusteward slurm jobs` shows it."""

    workload: Workload
    gpus: tuple[str, ...]
    protected: str


def _without_metrics(cfg: SlurmSourceSettings) -> SlurmParts:
    return build_slurm(cfg, BuildContext(clock=SystemClock(), metrics=_NoMetrics()))


def slurm_jobs(cfg: SlurmSourceSettings, parts: SlurmParts | None = None) -> tuple[list[JobRow], list[str]]:
    """Running GPU jobs as gpusteward sees them (without metrics), and what could not be read."""
    parts = parts or _without_metrics(cfg)
    view, problems = parts.client.jobs()
    rows = []
    for job in view.jobs:
        if not job.running or not (job.gpu_count or job.gpu_slots):
            continue
        try:
            workload, gpus, _ = parts.source.workload_of(job)
        except ValueError as e:
            problems.append(f"slurm job {job.display_id}: {e}")
            continue
        names = tuple(f"{g.node}/gpu{g.index}" if g.index >= 0 else "?" for g in gpus)
        rows.append(JobRow(workload, names, workload.annotations.get(PROTECT_REASON_KEY, "")))
    return rows, problems


def slurm_advice(cfg: SlurmSourceSettings, now: datetime) -> tuple[list[Finding], list[str]]:
    """Time-limit advice for running jobs, from their owners' finished jobs (sacct)."""
    parts = _without_metrics(cfg)
    rows, problems = slurm_jobs(cfg, parts)
    advice = cfg.advice
    records, bad = parts.client.recent_history(now, advice.history_days)
    findings = timelimit_advice(
        (r.workload for r in rows),
        typical_runtimes(records),
        now,
        factor=advice.limit_factor,
        min_jobs=advice.min_jobs,
        min_limit_minutes=advice.min_limit_minutes,
    )
    return findings, problems + bad[:10]
