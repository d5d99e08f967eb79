"""The one place Slurm's commands run: argv lists, a timeout, configurable binaries and environment.

Every failure becomes a ``SourceError`` that says which command failed and how: not installed
(``SourceUnavailable``), timed out, or exited non-zero (``SlurmCommandFailed`` with the exit
code and the start of stderr, so callers can tell "invalid job id" from "controller down").
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpusteward.domain.errors import SourceError, SourceUnavailable

log = logging.getLogger(__name__)

#: The commands gpusteward runs (``getent`` for owners' e-mail addresses).
TOOLS = ("squeue", "scontrol", "scancel", "sacct", "getent")
_CUT = 300


class SlurmCommandFailed(SourceError):
    """A command exited non-zero."""

    def __init__(self, argv: Sequence[str], rc: int, stderr: str) -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        first = " ".join(stderr.split())[:_CUT] or "no message"
        super().__init__(f"{' '.join(argv[:4])} exited {rc}: {first}")


@dataclass(frozen=True, slots=True)
class CommandResult:
    stdout: str
    stderr: str


class SlurmRunner:
    """Runs ``tool args...`` with ``SLURM_CONF`` set when configured and a timeout per command.

    ``binaries`` maps a tool to a path or a name; names are looked up in ``bin_dir`` first, then
    on ``PATH``.
    """

    def __init__(
        self,
        *,
        binaries: Mapping[str, str] | None = None,
        bin_dir: Path | None = None,
        slurm_conf: Path | None = None,
        timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.binaries = dict(binaries or {})
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s
        self.env = dict(os.environ if env is None else env)
        if slurm_conf is not None:
            self.env["SLURM_CONF"] = str(slurm_conf)

    def resolve(self, tool: str) -> str:
        """The executable for ``tool``; ``SourceUnavailable`` when it cannot be found."""
        name = self.binaries.get(tool, tool)
        if os.sep in name:
            if os.access(name, os.X_OK):
                return name
            raise SourceUnavailable(f"{tool}: {name} is not an executable file")
        if self.bin_dir is not None:
            candidate = self.bin_dir / name
            if os.access(candidate, os.X_OK):
                return str(candidate)
        found = shutil.which(name, path=self.env.get("PATH"))
        if found is None:
            where = f"{self.bin_dir} or PATH" if self.bin_dir else "PATH"
            raise SourceUnavailable(
                f"{tool}: {name!r} not found on {where}; install Slurm's client commands or set "
                f"source.slurm.binaries.{tool}"
            )
        return found

    def run(self, tool: str, *args: str, timeout_s: float | None = None) -> CommandResult:
        """Run and return stdout/stderr; raises ``SourceError`` (see the module doc) on any failure."""
        argv = [self.resolve(tool), *args]
        limit = self.timeout_s if timeout_s is None else timeout_s
        log.debug("running %s", argv)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=limit, env=self.env, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise SourceError(f"{tool} {' '.join(args[:3])} timed out after {limit:g} s") from e
        except OSError as e:
            raise SourceUnavailable(f"{tool}: cannot run {argv[0]}: {e}") from e
        if done.returncode != 0:
            raise SlurmCommandFailed([tool, *args], done.returncode, done.stderr or done.stdout)
        return CommandResult(done.stdout, done.stderr)
