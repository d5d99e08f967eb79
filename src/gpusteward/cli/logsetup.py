"""The log format of this invocation: ``--log-format`` wins, then the config's ``log.format``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from gpusteward.runtime.config import Settings
from gpusteward.runtime.logs import LogFormat, configure_logging, unconfigure


class LogFormatOpt(StrEnum):
    plain = "plain"
    json = "json"


_chosen: LogFormat | None = None


def choose(fmt: LogFormatOpt | None) -> Callable[[], None]:
    """From the global option; until a command reads its config, warnings already use it.
    Returns what undoes it when the command ends (in-process callers, tests, keep their logging)."""
    global _chosen
    _chosen = None if fmt is None else fmt.value
    level = logging.getLogger().level
    configure_logging(_chosen or "plain", logging.WARNING)
    return lambda: unconfigure(level)


def apply(settings: Settings | None, *, verbose: bool = False) -> None:
    """The format for a command that has read its config; INFO lines too when ``verbose``."""
    fmt: LogFormat = _chosen or (settings.log.format if settings is not None else "plain")
    configure_logging(fmt, logging.INFO if verbose else logging.WARNING)
