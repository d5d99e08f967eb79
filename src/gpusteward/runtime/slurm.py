"""Wiring for the ``slurm`` source: settings → runner, client, composite source and executor.

The metric source is another entry of the ``SOURCES`` registry (``source.slurm.metrics``),
built with the same settings; its own executors are not used (Slurm jobs are stopped
through Slurm).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpusteward.domain.errors import ConfigError, SourceError
from gpusteward.domain.models import Finding, Observation, Workload
from gpusteward.domain.ports import Clock, Source, SystemClock
from gpusteward.execution.slurm import SlurmExecutor
from gpusteward.runtime.adapters import Adapters, no_history
from gpusteward.runtime.config import Settings
from gpusteward.sensing.slurm import (
    ContactResolver,
    SlurmClient,
    SlurmJobControl,
    SlurmRunner,
    SlurmSource,
    timelimit_advice,
    typical_runtimes,
)
from gpusteward.sensing.slurm.source import PROTECT_REASON_KEY


@dataclass
class SlurmParts:
    runner: SlurmRunner
    client: SlurmClient
    source: SlurmSource
    executor: SlurmExecutor


def metric_source(settings: Settings, clock: Clock) -> Source:
    """The source named by ``source.slurm.metrics``, from the registry."""
    from gpusteward.runtime.wiring import SOURCES  # the registry imports this module

    name = settings.source.slurm.metrics
    factory = SOURCES.get(name)
    if factory is None or name in ("sim", "slurm"):
        known = ", ".join(sorted(n for n in SOURCES if n not in ("sim", "slurm"))) or "none installed"
        raise ConfigError(f"source.slurm.metrics: unknown metric source {name!r}; known: {known}")
    return factory(settings, clock).source


def slurm_runner(settings: Settings) -> SlurmRunner:
    """The runner of Slurm's commands as ``source.slurm`` configures it (binaries, conf, timeout)."""
    cfg = settings.source.slurm
    return SlurmRunner(
        binaries=cfg.binaries,
        bin_dir=cfg.bin_dir,
        slurm_conf=cfg.slurm_conf,
        timeout_s=cfg.command_timeout_seconds,
    )


def build_slurm(
    settings: Settings, clock: Clock, *, metrics: Source | None = None, executor_clock: Clock | None = None
) -> SlurmParts:
    """Everything the Slurm source needs; ``metrics`` replaces the configured metric source."""
    cfg = settings.source.slurm
    runner = slurm_runner(settings)
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
        metrics if metrics is not None else metric_source(settings, clock),
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
        grace_s=settings.policy.ladder.stop_grace_seconds,
        poll_s=cfg.grace_poll_seconds,
        force=cfg.force,
        clock=executor_clock,
    )
    return SlurmParts(runner, client, source, executor)


def slurm_adapters(settings: Settings, clock: Clock) -> Adapters:
    """The ``SOURCES["slurm"]`` factory."""

    parts = build_slurm(settings, clock)
    return Adapters(source=parts.source, executors=[parts.executor], history=no_history)


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


def slurm_jobs(settings: Settings, parts: SlurmParts | None = None) -> tuple[list[JobRow], list[str]]:
    """Running GPU jobs as gpusteward sees them (without metrics), and what could not be read."""
    parts = parts or build_slurm(settings, SystemClock(), metrics=_NoMetrics())
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


def slurm_advice(settings: Settings, now: datetime) -> tuple[list[Finding], list[str]]:
    """Time-limit advice for running jobs, from their owners' finished jobs (sacct)."""
    cfg = settings.source.slurm.advice
    parts = build_slurm(settings, SystemClock(), metrics=_NoMetrics())
    rows, problems = slurm_jobs(settings, parts)
    records, bad = parts.client.recent_history(now, cfg.history_days)
    findings = timelimit_advice(
        (r.workload for r in rows),
        typical_runtimes(records),
        now,
        factor=cfg.limit_factor,
        min_jobs=cfg.min_jobs,
        min_limit_minutes=cfg.min_limit_minutes,
    )
    return findings, problems + bad[:10]
