"""Slurm's job table and job control through the runner: read with ``--json``, or text where not.

``format="auto"`` tries ``squeue --json`` and, if this Slurm has no such option (or no JSON
plugin), switches to ``scontrol --oneliner --details show job`` for good. A controller that
is down is not a reason to switch: it is an error.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, tzinfo
from typing import Literal

from gpusteward.integrations.slurm.commands import SlurmCommandFailed, SlurmRunner
from gpusteward.integrations.slurm.model import JobView, SacctRecord, SacctStart, SlurmJob
from gpusteward.integrations.slurm.parse_json import parse_jobs_json
from gpusteward.integrations.slurm.parse_text import (
    SACCT_FIELDS,
    START_FIELDS,
    parse_sacct,
    parse_sacct_starts,
    parse_scontrol_jobs,
)

log = logging.getLogger(__name__)

Format = Literal["auto", "json", "text"]
_NO_JSON = re.compile(r"unrecognized option|invalid option|unknown option|plugin", re.IGNORECASE)
_GONE = re.compile(r"invalid job id", re.IGNORECASE)


def _local_tz() -> tzinfo:
    tz = datetime.now().astimezone().tzinfo
    assert tz is not None
    return tz


class SlurmClient:
    """Reads jobs and sends signals, cancels and requeues. Every error is a ``SourceError``."""

    def __init__(self, runner: SlurmRunner, *, format: Format = "auto", tz: tzinfo | None = None) -> None:
        self.runner = runner
        self.format: Format = format
        self.tz = tz or _local_tz()

    def _use_json(self) -> bool:
        return self.format != "text"

    def _json(self, *args: str) -> tuple[JobView, list[str]] | None:
        """``squeue --json args``; None when this Slurm cannot print JSON (and auto falls back)."""
        try:
            out = self.runner.run("squeue", "--json", *args)
        except SlurmCommandFailed as e:
            if self.format == "auto" and _NO_JSON.search(e.stderr):
                log.warning("squeue has no JSON output here (%s); reading scontrol's text from now on", e)
                self.format = "text"
                return None
            raise
        return parse_jobs_json(out.stdout)

    def jobs(self) -> tuple[JobView, list[str]]:
        """The whole job table (JSON: running jobs; Slurm before 23.02 ignores the filter) and problems."""
        return self._table("RUNNING")

    def queue_jobs(self) -> tuple[JobView, list[str]]:
        """Pending and running jobs in one call: the queue, and the starts that give queue times."""
        return self._table("PENDING,RUNNING")

    def _table(self, states: str) -> tuple[JobView, list[str]]:
        """``squeue --json --states=<states>``, or scontrol's whole text table where there is no JSON."""
        if self._use_json():
            got = self._json(f"--states={states}")
            if got is not None:
                return got
        out = self.runner.run("scontrol", "--oneliner", "--details", "show", "job")
        return parse_scontrol_jobs(out.stdout, self.tz)

    def starts(self, since: datetime, until: datetime) -> tuple[list[SacctStart], list[str]]:
        """Allocations of every user that started between two times, from ``sacct`` (fails with
        ``SlurmCommandFailed`` where accounting is disabled)."""
        out = self.runner.run(
            "sacct",
            "--allusers",
            "--allocations",
            "--noheader",
            "--parsable2",
            f"--starttime={self._stamp(since)}",
            f"--endtime={self._stamp(until)}",
            f"--format={','.join(START_FIELDS)}",
            timeout_s=max(self.runner.timeout_s, 60.0),
        )
        return parse_sacct_starts(out.stdout, self.tz)

    def _stamp(self, at: datetime) -> str:
        return at.astimezone(self.tz).strftime("%Y-%m-%dT%H:%M:%S")

    def job(self, job_id: str) -> SlurmJob | None:
        """One job, read now; None when the controller no longer knows it."""
        got: tuple[JobView, list[str]] | None = None
        try:
            if self._use_json():
                got = self._json(f"--jobs={job_id}")
            if got is None:
                out = self.runner.run("scontrol", "--oneliner", "--details", "show", "job", job_id)
                got = parse_scontrol_jobs(out.stdout, self.tz)
        except SlurmCommandFailed as e:
            if _GONE.search(e.stderr):
                return None
            raise
        view, _ = got
        return next((j for j in view.jobs if j.job_id == job_id), None)

    def _control(self, tool: str, *args: str) -> bool:
        """Run a control command; False when the job is already gone."""
        try:
            self.runner.run(tool, *args)
        except SlurmCommandFailed as e:
            if _GONE.search(e.stderr):
                return False
            raise
        return True

    def signal(self, job_id: str, signal: str, *, full: bool = True) -> bool:
        """``scancel --signal=SIG [--full] JOB``: ``--full`` reaches the batch script and its children."""
        return self._control("scancel", f"--signal={signal}", *(["--full"] if full else []), job_id)

    def cancel(self, job_id: str, *, full: bool = False) -> bool:
        """``scancel [--full] JOB``: Slurm's own SIGTERM, KillWait, SIGKILL."""
        return self._control("scancel", *(["--full"] if full else []), job_id)

    def requeue(self, job_id: str) -> bool:
        """``scontrol requeue JOB``: the job goes back to the queue and its GPUs are freed."""
        return self._control("scontrol", "requeue", job_id)

    def history(self, since: datetime, until: datetime) -> tuple[list[SacctRecord], list[str]]:
        """Completed allocations of every user between two times, from ``sacct``."""

        def stamp(at: datetime) -> str:
            return at.astimezone(self.tz).strftime("%Y-%m-%dT%H:%M:%S")

        out = self.runner.run(
            "sacct",
            "--allusers",
            "--allocations",
            "--noheader",
            "--parsable2",
            "--state=COMPLETED",
            f"--starttime={stamp(since)}",
            f"--endtime={stamp(until)}",
            f"--format={','.join(SACCT_FIELDS)}",
            timeout_s=max(self.runner.timeout_s, 60.0),
        )
        return parse_sacct(out.stdout)

    def passwd(self, user: str) -> str | None:
        """``getent passwd USER``; None when there is no such user (getent exits 2)."""
        try:
            return self.runner.run("getent", "passwd", user).stdout.strip() or None
        except SlurmCommandFailed as e:
            if e.rc == 2:
                return None
            raise

    def recent_history(self, now: datetime, days: float) -> tuple[list[SacctRecord], list[str]]:
        return self.history(now - timedelta(days=days), now)
