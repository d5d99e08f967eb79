"""One writing agent per SQLite file: ``gpusteward run`` holds an OS lock next to the database
(``<file>.lock``) for its whole life, and a second ``run`` on the same file stops at once with
the holder's pid.

Two agents on one SQLite file both decide and act: they race for audit sequence numbers, reset
each other's ladders and repeat warnings. SQLite has no session to hang leader election on, so
the lock is the kernel's (``flock``): it goes with the process, however it dies, and never
needs cleaning up. PostgreSQL needs none of this; two replicas elect a leader there
(``store.leadership``). Readers (``serve``, the CLI) never take it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from gpusteward.domain.errors import StoreError


class WriterLock:
    """The held lock; ``release`` (or the process's end) frees it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_path(url: str) -> Path | None:
    """``<database>.lock`` for a SQLite file, None for anything else (memory, PostgreSQL)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    db = parsed.database
    if parsed.get_backend_name() != "sqlite" or db in (None, "", ":memory:") or db.startswith("file:"):
        return None
    return Path(f"{db}.lock")


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"


def hold_writer_lock(url: str) -> WriterLock | None:
    """Take the SQLite file's writer lock for this process, or raise ``StoreError`` naming the
    process that holds it. None when the store needs no lock."""
    path = lock_path(url)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StoreError(f"cannot create the writer lock {path}: {e.strerror or e}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(fd)
        os.close(fd)
        raise StoreError(
            f"another gpusteward run (pid {holder}) is already the writer of {path.with_suffix('')}; "
            f"stop it first (one writer per SQLite file; lock {path})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return WriterLock(path, fd)
