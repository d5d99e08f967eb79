"""Files the CLI writes for people (audit exports, HTML reports), written all or nothing.

A write goes to a temporary file beside the target and is renamed over it only once complete
and synced: a full disk, a crash or an error halfway leaves the old file (or none), never a
truncated one that looks like a whole export. Failures are one-line ``StoreError``s.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from gpusteward.domain.errors import StoreError


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def ensure_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) unless it exists; a file in its place is an error."""
    if folder.exists() and not folder.is_dir():
        raise StoreError(f"{folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create folder {folder}: {_reason(e)}") from None


@contextmanager
def atomic_text(path: Path, *, newline: str | None = None) -> Iterator[TextIO]:
    """A UTF-8 text file that becomes ``path`` when the block ends without an error."""
    folder = path.parent
    if path.is_dir():
        raise StoreError(f"{path}: is a folder; name a file")
    if not folder.is_dir():
        raise StoreError(f"{path}: folder {folder} does not exist")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise StoreError(f"cannot write {path}: {_reason(e)}") from None
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the file
        # mkstemp makes it 0600: keep the old file's mode, else the usual 0644.
        tmp.chmod(path.stat().st_mode & 0o777 if path.exists() else 0o644)
        tmp.replace(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(f"cannot write {path}: {_reason(e)}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` all or nothing."""
    with atomic_text(path) as f:
        f.write(text)
