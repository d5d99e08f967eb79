"""The error tree. Every error gpusteward raises on purpose derives from ``StewardError``.

StewardError
├── ConfigError            bad config or rule file (file, line, problem); CLI exit code 2
│   └── RuleError          a rule that does not validate or compile
├── SourceError            a source could not observe (down, timeout, bad payload)
│   └── SourceUnavailable  the source cannot work here at all (no driver, no binary)
├── ExecutionError         an executor could not carry out an action
│   └── PreflightFailed    the re-check before acting no longer holds
├── StoreError             durable state could not be read or written
└── ControlError           an approval, snooze or token request that cannot be granted
                           (unknown or finished workload, expired approval, over the limit)
"""

from __future__ import annotations


class StewardError(Exception):
    """Base of all gpusteward errors."""


class ConfigError(StewardError):
    """A config or rule file is invalid. ``str()`` names the file, the line and the problem."""

    def __init__(self, problem: str, *, path: str | None = None, line: int | None = None) -> None:
        self.problem = problem
        self.path = path
        self.line = line
        where = path or "<config>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {problem}")


class RuleError(ConfigError):
    """A rule failed validation or its expression failed to compile."""


class SourceError(StewardError):
    """A source failed to observe this time; the tick goes on without it."""


class SourceUnavailable(SourceError):
    """A source cannot run on this machine at all."""


class ExecutionError(StewardError):
    """An executor failed to carry out an action."""


class PreflightFailed(ExecutionError):
    """The evidence no longer holds when re-checked just before acting."""


class StoreError(StewardError):
    """Durable state could not be read or written."""


class ControlError(StewardError):
    """An owner or admin control (approve, reject, snooze, token) that cannot be carried out."""
