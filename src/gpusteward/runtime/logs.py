"""Log lines for people (plain) or for a log store (one JSON object per line, Loki/ELK).

Every line carries what is known where it was written: the tick id (a contextvar set around each
tick), and the workload, rule, action and idempotency key of the action being carried out (set
around each action, or passed as ``extra=``). Lower layers only log; the CLI picks the format.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal, TextIO

LogFormat = Literal["plain", "json"]
#: Context keys, in the order a JSON line lists them.
FIELDS = ("tick", "workload", "rule", "action", "key")

_context: ContextVar[dict[str, str] | None] = ContextVar("gpusteward_log_context", default=None)


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Add ``fields`` (among FIELDS) to every line logged inside, on this thread or task."""
    known = {k: str(v) for k, v in fields.items() if v}
    token = _context.set({**(_context.get() or {}), **known})
    try:
        yield
    finally:
        _context.reset(token)


def tick_id() -> str | None:
    """The id of the tick running on this thread, if one is."""
    return (_context.get() or {}).get("tick")


def new_tick_id() -> str:
    """Short and unique enough to find one tick's lines across replicas."""
    return uuid.uuid4().hex[:12]


def _fields(record: logging.LogRecord) -> dict[str, str]:
    """The context, overridden by what the call passed as ``extra=``."""
    found = dict(_context.get() or {})
    for name in FIELDS:
        value = getattr(record, name, None)
        if value:
            found[name] = str(value)
    return {k: found[k] for k in FIELDS if k in found}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, context, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """The usual line, with the context appended as key=value so a person can grep it too."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        if not extra:
            return text
        head, sep, tail = text.partition("\n")  # after the message, before a traceback
        return f"{head} [{extra}]{sep}{tail}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when the line is logged (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure_logging(fmt: LogFormat, level: int) -> None:
    """One handler on the root logger, in ``fmt``; replaces the one a previous call installed."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root.addHandler(handler)
    root.setLevel(level)


def unconfigure(level: int) -> None:
    """Remove the handler configure_logging installed and set the root level back to ``level``."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    root.setLevel(level)


def configured() -> bool:
    """Whether configure_logging installed the root handler (uvicorn then logs through it)."""
    return any(isinstance(h, _StderrHandler) for h in logging.getLogger().handlers)
