"""The ``GPUSTEWARD_*`` environment beside the config file: which variable set a value that
failed validation (so the error names it, not the file), and which variables set nothing."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence

from pydantic import BaseModel

PREFIX = "GPUSTEWARD_"
#: Variables that are not settings of the agent: read from a workload's environment by the
#: sources (checkpoint signal, protection, team), or by the test suite.
NOT_SETTINGS = ("CHECKPOINT_SIGNAL", "PROTECT", "TEAM", "EXCLUDE_UNTIL", "LIVE_K8S", "CHROMIUM")


def _ours() -> dict[str, str]:
    """Upper-cased name → name of every ``GPUSTEWARD_*`` variable set (matched case-insensitively)."""
    return {k.upper(): k for k in os.environ if k.upper().startswith(PREFIX)}


def variable_for(loc: Sequence[object]) -> str | None:
    """The variable that set the value at ``loc`` (or the section holding it), if one did."""
    env = _ours()
    parts = [str(p).upper() for p in loc if isinstance(p, str)]
    for n in range(len(parts), 0, -1):
        name = PREFIX + "__".join(parts[:n])
        if name in env:
            return env[name]
    return None


def _not_setting(rest: str) -> bool:
    # Kubernetes sets <SERVICE>_PORT, <SERVICE>_SERVICE_HOST, ... for a Service named gpusteward;
    # `serve --workers` tells its workers their config in SERVE_WORKER_* (web/workers.py).
    return rest in NOT_SETTINGS or rest.startswith(("TEST_", "SERVICE_", "PORT", "SERVE_WORKER_"))


def unknown_variables(model: type[BaseModel]) -> list[str]:
    """One line per ``GPUSTEWARD_*`` variable that names no setting of ``model``, with the
    closest setting where there is one (``GPUSTEWARD_MODEE`` would be ignored silently)."""
    out = []
    for upper, name in sorted(_ours().items()):
        rest = upper[len(PREFIX) :]
        if _not_setting(rest):
            continue
        top = rest.split("__", 1)[0].lower()
        if top in model.model_fields:
            continue  # a wrong key below a section is an error pydantic reports itself
        close = difflib.get_close_matches(top, list(model.model_fields), n=1, cutoff=0.75)
        hint = f" (did you mean {PREFIX}{close[0].upper()}?)" if close else ""
        out.append(f"environment variable {name} is not a setting and is ignored{hint}")
    return out
