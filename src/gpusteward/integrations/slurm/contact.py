"""A job owner's e-mail address from their user name, by a configurable rule.

In order: a mapping file (``user: address`` YAML, or ``user address`` / ``user,address``
lines), the GECOS field of ``getent passwd user`` (the first comma-separated part holding an
``@``), then ``user@domain``. A rule that gives nothing falls through to the next; no rule
gives ``None`` (the notice then goes to admins' channel only).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from gpusteward.domain.errors import ConfigError, SourceError
from gpusteward.domain.yamlload import parse_yaml

log = logging.getLogger(__name__)

_EMAIL = re.compile(r"[^@\s,;:<>]+@[^@\s,;:<>]+\.[^@\s,;:<>]+")


def parse_mapping(text: str) -> dict[str, str]:
    """``user: address`` YAML, or one ``user address`` / ``user,address`` per line (``#`` comments)."""
    try:
        data = parse_yaml(text, "<contacts>").data
    except ConfigError:
        data = None
    if isinstance(data, Mapping):
        return {str(k).strip(): str(v).strip() for k, v in data.items() if v is not None}
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        parts = re.split(r"[\s,:]+", line, maxsplit=1)
        if len(parts) == 2 and parts[1].strip():
            out[parts[0]] = parts[1].strip()
    return out


def gecos_email(passwd_line: str) -> str | None:
    """The first address in the GECOS field of one ``getent passwd`` line (``Bob <bob@x.org>`` too)."""
    fields = passwd_line.strip().split(":")
    if len(fields) < 5:
        return None
    m = _EMAIL.search(fields[4])
    return m.group(0) if m else None


class ContactResolver:
    """user → e-mail, cached per user. ``getent`` is a callable (user → passwd line or None)."""

    def __init__(
        self,
        *,
        domain: str = "",
        map_file: Path | None = None,
        gecos: bool = False,
        getent: Callable[[str], str | None] | None = None,
    ) -> None:
        self.domain = domain.strip().lstrip("@")
        self.map_file = map_file
        self.gecos = gecos and getent is not None
        self._getent = getent
        self._map: dict[str, str] = {}
        self._map_mtime: float | None = None
        self._cache: dict[str, str | None] = {}

    def _mapping(self) -> Mapping[str, str]:
        if self.map_file is None:
            return {}
        try:
            mtime = self.map_file.stat().st_mtime
            if mtime != self._map_mtime:
                self._map = parse_mapping(self.map_file.read_text(encoding="utf-8"))
                self._map_mtime = mtime
                self._cache.clear()
        except OSError as e:
            log.warning("contact map %s unreadable: %s", self.map_file, e)
        return self._map

    def __call__(self, user: str) -> str | None:
        if not user:
            return None
        mapped = self._mapping().get(user)
        if mapped:
            return mapped
        if user in self._cache:
            return self._cache[user]
        found: str | None = None
        if self.gecos and self._getent is not None:
            try:
                line = self._getent(user)
            except SourceError as e:
                # Not cached: the next tick tries again.
                log.warning("getent passwd %s failed: %s", user, e)
                return f"{user}@{self.domain}" if self.domain else None
            found = gecos_email(line) if line else None
        if found is None and self.domain:
            found = f"{user}@{self.domain}"
        self._cache[user] = found
        return found
