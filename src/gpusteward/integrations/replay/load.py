"""Which loader reads a trace file: by the ``format`` asked for, or by its header."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.replay import generic, helios, philly
from gpusteward.integrations.replay.trace import Trace

TraceFormat = Literal["auto", "generic", "philly", "helios"]


def sniff(path: str | Path) -> TraceFormat:
    """``generic``, ``philly`` or ``helios`` from the file's suffix and header row."""
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq"):
        return "generic"
    try:
        with p.open(newline="", encoding="utf-8") as f:
            header = [h.strip() for h in next(csv.reader(f), [])]
    except OSError as e:
        raise ConfigError(f"cannot read trace: {e.strerror or e}", path=str(p)) from e
    except (csv.Error, UnicodeDecodeError) as e:
        raise ConfigError(f"not a CSV file: {e}", path=str(p)) from e
    if tuple(header[:4]) == philly.HEADER:
        return "philly"
    if all(c in header for c in helios.REQUIRED):
        return "helios"
    if "timestamp" in header and "gpu" in header:
        return "generic"
    raise ConfigError(
        "unknown trace format: expected the generic long table (timestamp, gpu, util_pct, ...), "
        "a Philly window file or a Helios cluster sequence",
        path=str(p),
        line=1,
    )


def load_trace(path: str | Path, fmt: TraceFormat = "auto", *, gpu_model: str = "") -> Trace:
    """Read a trace. ``gpu_model`` names the GPUs whose model the trace does not give."""
    kind = sniff(path) if fmt == "auto" else fmt
    if kind == "philly":
        return philly.load_philly(path, gpu_model=gpu_model)
    if kind == "helios":
        return helios.load_helios(path, gpu_model=gpu_model)
    return generic.load_generic(path, gpu_model=gpu_model)
