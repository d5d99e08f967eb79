"""The ``slurm`` source: jobs from squeue/scontrol joined with a metric source's GPUs."""

from gpusteward.integrations.slurm.client import SlurmClient
from gpusteward.integrations.slurm.commands import SlurmCommandFailed, SlurmRunner
from gpusteward.integrations.slurm.contact import ContactResolver
from gpusteward.integrations.slurm.model import JobView, SacctRecord, SlurmJob
from gpusteward.integrations.slurm.parse_json import parse_jobs_json
from gpusteward.integrations.slurm.parse_text import parse_sacct, parse_scontrol_jobs
from gpusteward.integrations.slurm.settings import SlurmSourceSettings
from gpusteward.integrations.slurm.source import SlurmJobControl, SlurmSource
from gpusteward.integrations.slurm.timelimit_advice import Runtimes, timelimit_advice, typical_runtimes

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
