"""Workload classes: what kind of work holds a GPU, so each kind gets its own rules and timings.

* ``service``: inference and other long-running servers (Deployment, StatefulSet,
  InferenceService, LeaderWorkerSet, a Knative service). Idle between bursts is normal.
* ``batch``: training and other jobs that run to an end (Job, a Slurm batch job, a script).
  Idle for long means crashed, hung or finished without letting go.
* ``interactive``: a person at a keyboard (Notebook, a Slurm interactive partition, Jupyter).
* ``unknown``: nothing says which (a bare pod, a replayed trace): judged by behaviour alone.

Derived from what the integration knows, in order: an explicit ``gpusteward.io/class`` label
or annotation, the Kubernetes owner kind, the Slurm partition and job name, the process name.
Pure and cheap: a few dictionary look-ups per workload.
"""

from __future__ import annotations

import re
from typing import Literal

from gpusteward.domain.models import Workload, WorkloadKind

WorkloadClass = Literal["service", "batch", "interactive", "unknown"]
CLASSES: tuple[WorkloadClass, ...] = ("service", "batch", "interactive", "unknown")
#: A label or annotation that names the class outright.
CLASS_KEY = "gpusteward.io/class"

_SERVICE_KINDS = frozenset(
    {"Deployment", "StatefulSet", "ReplicaSet", "InferenceService", "LeaderWorkerSet", "Service", "Revision"}
)
_BATCH_KINDS = frozenset({"Job", "CronJob", "PyTorchJob", "TFJob", "MPIJob", "RayJob", "JobSet", "Workflow"})
_INTERACTIVE_KINDS = frozenset({"Notebook"})
_INTERACTIVE_WORDS = ("jupyter", "notebook", "ipykernel", "interactive")
_INTERACTIVE_SHELLS = frozenset({"bash", "sh", "zsh", "srun", "salloc"})


#: Any of the words as a substring: one regex search instead of one ``in`` per word.
_INTERACTIVE_RE = re.compile("|".join(map(re.escape, _INTERACTIVE_WORDS)))


def _interactive_name(name: str) -> bool:
    return _INTERACTIVE_RE.search(name.lower()) is not None


def workload_class(w: Workload) -> WorkloadClass:
    """The class of ``w`` from what its integration reported (see the module docstring)."""
    # Called for every workload each tick: w.tag() inlined, and most refs are small or empty.
    labels = w.labels
    tag = labels[CLASS_KEY] if CLASS_KEY in labels else w.annotations.get(CLASS_KEY)
    if tag:
        explicit = tag.strip().lower()
        if explicit in CLASSES:
            return explicit
    ref = w.ref
    owner_kind = ref.get("kind", "") if ref else ""
    if owner_kind and "namespace" in ref:  # a Kubernetes owner
        if owner_kind in _SERVICE_KINDS:
            return "service"
        if owner_kind in _BATCH_KINDS:
            return "batch"
        if owner_kind in _INTERACTIVE_KINDS or _interactive_name(w.name):
            return "interactive"
        return "unknown"  # a bare pod or an unknown operator
    if ref and "job_id" in ref:  # a Slurm job
        partition = ref.get("partition", "").lower()
        if "interactive" in partition or w.name.lower() in _INTERACTIVE_SHELLS or _interactive_name(w.name):
            return "interactive"
        return "batch"
    if w.kind is WorkloadKind.PROCESS:
        return "interactive" if _interactive_name(w.name) else "batch"
    if w.kind is WorkloadKind.JOB:
        return "interactive" if _interactive_name(w.name) else "batch"
    return "unknown"
