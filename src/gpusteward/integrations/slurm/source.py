"""The ``slurm`` source: Slurm's running jobs as workloads, a metric source's GPUs and samples.

A job's GPUs are found by node name and Slurm's GPU index (``gres_detail`` ``IDX``) among the
metric source's GPUs, whose uuids are kept. Where that fails, jobs the metric source itself
labels (DCGM ``hpc_job``, jobstats ``jobid``) lend their GPUs. A GPU Slurm allocates but the
metric source does not report gets a placeholder without samples: its job then has no fresh
data and is never acted on (no data is not idleness).

Either side failing fails the observation (``SourceError``): jobs without fresh state, or
GPUs without fresh samples, must not be judged.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Protocol

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import (
    EXCLUDE_UNTIL_KEY,
    PROTECT_KEY,
    Gpu,
    Observation,
    Owner,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.ports import Source
from gpusteward.integrations.slurm.model import JobView, SlurmJob

log = logging.getLogger(__name__)

PROTECT_REASON_KEY = "gpusteward.io/protect-reason"
#: Labels a metric source may put on a workload to name the Slurm job holding its GPUs.
JOB_TAGS = ("hpc_job", "jobid", "slurm_job_id", "slurm.job_id")
_EXCLUDE = re.compile(r"gpusteward:exclude-until=(\S+)")


class JobReader(Protocol):
    """What the source needs of Slurm (``SlurmClient`` in production, a fake in tests)."""

    def jobs(self) -> tuple[JobView, list[str]]: ...

    def job(self, job_id: str) -> SlurmJob | None: ...


@functools.lru_cache(maxsize=65536)
def _short(node: str) -> str:
    """``gpu1.cluster.example`` → ``gpu1``; an IP address stays whole (map it with node_names)."""
    node = node.strip().lower()
    if node.replace(".", "").isdigit() or ":" in node:
        return node
    return node.split(".", 1)[0]


class SlurmSource:
    """Implements ``Source``: jobs from ``reader``, GPUs and samples from ``metrics``."""

    def __init__(
        self,
        reader: JobReader,
        metrics: Source,
        *,
        name: str = "slurm",
        cluster: str = "",
        node_names: Mapping[str, str] | None = None,
        protect_partitions: Iterable[str] = (),
        protect_qos: Iterable[str] = (),
        comment_tag: str = "gpusteward:protect",
        contact: Callable[[str], str | None] | None = None,
    ) -> None:
        self.name = name
        self.reader = reader
        self.metrics = metrics
        self.cluster = cluster
        self.node_names = {k: _short(v) for k, v in (node_names or {}).items()}
        self.protect_partitions = frozenset(protect_partitions)
        self.protect_qos = frozenset(protect_qos)
        self.comment_tag = comment_tag.strip()
        self.contact = contact
        #: (short node name, GPU index) → GPU, from the metric source's latest observation.
        self._gpus: dict[tuple[str, int], Gpu] = {}
        self._tagged: dict[str, tuple[str, ...]] = {}

    # -- the join -------------------------------------------------------------------------

    def _node(self, slurm_node: str) -> str:
        return self.node_names.get(slurm_node) or _short(slurm_node)

    def _remember(self, obs: Observation) -> None:
        self._gpus = {(_short(g.node), g.index): g for g in obs.gpus}
        tagged: dict[str, list[str]] = {}
        for w in obs.workloads:
            ident = next((v for k in JOB_TAGS if (v := w.tag(k) or w.ref.get(k))), None)
            if ident is None and w.kind is WorkloadKind.JOB:
                ident = w.ref.get("job_id")  # the prometheus source's job/<id> from hpc_job/jobid
            if ident:
                tagged.setdefault(ident.strip(), []).extend(w.gpu_uuids)
        self._tagged = {k: tuple(dict.fromkeys(v)) for k, v in tagged.items()}

    def _job_gpus(self, job: SlurmJob) -> tuple[list[Gpu], list[str]]:
        """The job's GPUs (placeholders where the metric source has none) and what is missing."""
        gpus: list[Gpu] = []
        missing: list[str] = []
        for node, index in job.gpu_slots:
            gpu = self._gpus.get((self._node(node), index))
            if gpu is None:
                missing.append(f"{node}/gpu{index}")
                gpu = Gpu(f"slurm:{node}:{index}", node, index, job.gpu_type or "unknown", 0.0)
            gpus.append(gpu)
        if len(gpus) < job.gpu_count:
            by_uuid = {g.uuid: g for g in self._gpus.values()}
            lent = self._tagged.get(job.job_id) or self._tagged.get(job.display_id) or ()
            known = {g.uuid for g in gpus}
            gpus.extend(by_uuid[u] for u in lent if u in by_uuid and u not in known)
        for k in range(len(gpus), job.gpu_count):
            # Allocated GPUs whose indices nobody reports: keep them, without data, so the job is
            # never judged on the GPUs that happen to be known.
            missing.append(f"GPU {k + 1} of {job.gpu_count} (no index)")
            gpus.append(
                Gpu(f"slurm:{job.job_id}:unknown{k}", job.nodes[0] if job.nodes else "?", -1, "unknown", 0.0)
            )
        return gpus, missing

    # -- workloads --------------------------------------------------------------------------

    def _protection(self, job: SlurmJob) -> str | None:
        words = set(re.split(r"[\s,;]+", job.comment)) if job.comment else set()
        if self.comment_tag and self.comment_tag in words:
            return f"job comment has {self.comment_tag}"
        if job.partition and job.partition in self.protect_partitions:
            return f"partition {job.partition} is protected"
        if job.qos and job.qos in self.protect_qos:
            return f"QOS {job.qos} is protected"
        return None

    def workload_id(self, job: SlurmJob) -> str:
        cluster = self.cluster or job.cluster
        return f"slurm:{cluster}:{job.display_id}" if cluster else f"slurm:{job.display_id}"

    def workload_of(self, job: SlurmJob) -> tuple[Workload, list[Gpu], list[str]]:
        """The job as a workload, its GPUs, and the GPUs that could not be matched to metrics."""
        if job.started_at is None:
            raise ValueError(f"job {job.display_id} is running without a start time")
        gpus, missing = self._job_gpus(job)
        annotations = {"slurm.comment": job.comment} if job.comment else {}
        if job.time_limit_minutes is not None:
            annotations["slurm.time_limit_minutes"] = str(job.time_limit_minutes)
        why = self._protection(job)
        if why:
            annotations[PROTECT_KEY] = "true"
            annotations[PROTECT_REASON_KEY] = why
        if m := _EXCLUDE.search(job.comment):
            annotations[EXCLUDE_UNTIL_KEY] = m.group(1)
        cluster = self.cluster or job.cluster
        labels = {
            "slurm.partition": job.partition,
            "slurm.account": job.account,
            "slurm.qos": job.qos,
            "slurm.gpu_type": job.gpu_type,
            "slurm.cluster": cluster,
        }
        ref = {
            "job_id": job.job_id,
            "display_id": job.display_id,
            "cluster": cluster,
            "user": job.user,
            "account": job.account,
            "partition": job.partition,
            "qos": job.qos,
            "requeue": "true" if job.requeue else "false",
            "nodes": ",".join(job.nodes),
        }
        workload = Workload(
            id=self.workload_id(job),
            kind=WorkloadKind.JOB,
            name=job.name or job.display_id,
            owner=Owner(job.user, job.account, self.contact(job.user) if self.contact else None),
            gpus_requested=max(job.gpu_count, len(gpus)),
            gpu_uuids=tuple(g.uuid for g in gpus),
            started_at=job.started_at,
            source=self.name,
            labels={k: v for k, v in labels.items() if v},
            annotations=annotations,
            ref=ref,
        )
        return workload, gpus, missing

    def fresh(self, workload: Workload) -> Workload | None:
        """The job behind ``workload`` as Slurm shows it now; None when it no longer runs.

        Raises ``SourceError`` when Slurm cannot be read.
        """
        job_id = workload.ref.get("job_id")
        if not job_id:
            return None
        job = self.reader.job(job_id)
        if job is None or not job.running:
            return None
        try:
            return self.workload_of(job)[0]
        except ValueError as e:
            raise SourceError(f"slurm job {job.display_id} unreadable: {e}") from e

    # -- Source -----------------------------------------------------------------------------

    def observe(self, now: datetime) -> Observation:
        try:
            view, problems = self.reader.jobs()
        except SourceError as e:
            raise SourceError(f"slurm: cannot read the job table: {e}") from e
        try:
            metrics = self.metrics.observe(now)
        except SourceError as e:
            raise SourceError(f"slurm: metric source {self.metrics.name} failed: {e}") from e
        self._remember(metrics)
        errors = list(problems) + [f"{self.metrics.name}: {e}" for e in metrics.errors]
        gpus = {g.uuid: g for g in metrics.gpus}
        workloads = []
        for job in view.jobs:
            if not job.running or (job.gpu_count == 0 and not job.gpu_slots):
                continue
            try:
                workload, job_gpus, missing = self.workload_of(job)
            except ValueError as e:
                errors.append(f"slurm job {job.display_id}: {e}")
                continue
            if missing:
                errors.append(
                    f"slurm job {job.display_id}: no metrics for {', '.join(missing[:4])}"
                    f"{' and more' if len(missing) > 4 else ''}; it is not judged"
                )
            for g in job_gpus:
                gpus.setdefault(g.uuid, g)
            workloads.append(workload)
        return Observation(
            at=now,
            gpus=tuple(gpus.values()),
            samples=metrics.samples,
            workloads=tuple(workloads),
            errors=tuple(errors),
        )

    def close(self) -> None:
        self.metrics.close()


class JobControl(Protocol):
    def signal(self, job_id: str, signal: str, *, full: bool = True) -> bool: ...

    def cancel(self, job_id: str, *, full: bool = False) -> bool: ...

    def requeue(self, job_id: str) -> bool: ...


class SlurmJobControl:
    """What the Slurm executor needs (``execution.slurm.SlurmControl``): the source's fresh view of
    a job, with the GPUs it joined, and the client's scancel / requeue."""

    def __init__(self, source: SlurmSource, control: JobControl) -> None:
        self.source = source
        self.control = control

    def fresh(self, workload: Workload) -> Workload | None:
        return self.source.fresh(workload)

    def signal(self, job_id: str, signal: str, *, full: bool = True) -> bool:
        return self.control.signal(job_id, signal, full=full)

    def cancel(self, job_id: str, *, full: bool = False) -> bool:
        return self.control.cancel(job_id, full=full)

    def requeue(self, job_id: str) -> bool:
        return self.control.requeue(job_id)
