"""The ``slurm`` source: jobs from squeue/scontrol joined with a metric source's GPUs."""

from gpusteward.sensing.slurm.advice import Runtimes, timelimit_advice, typical_runtimes
from gpusteward.sensing.slurm.client import SlurmClient
from gpusteward.sensing.slurm.contact import ContactResolver
from gpusteward.sensing.slurm.model import JobView, SacctRecord, SlurmJob
from gpusteward.sensing.slurm.parse_json import parse_jobs_json
from gpusteward.sensing.slurm.parse_text import parse_sacct, parse_scontrol_jobs
from gpusteward.sensing.slurm.runner import SlurmCommandFailed, SlurmRunner
from gpusteward.sensing.slurm.settings import SlurmSourceSettings
from gpusteward.sensing.slurm.source import SlurmJobControl, SlurmSource

__all__ = [
    "ContactResolver",
    "JobView",
    "Runtimes",
    "SacctRecord",
    "SlurmClient",
    "SlurmCommandFailed",
    "SlurmJob",
    "SlurmJobControl",
    "SlurmRunner",
    "SlurmSource",
    "SlurmSourceSettings",
    "parse_jobs_json",
    "parse_sacct",
    "parse_scontrol_jobs",
    "timelimit_advice",
    "typical_runtimes",
]
