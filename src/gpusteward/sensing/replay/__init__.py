"""The ``replay`` source: GPU traces (generic long table, Philly, Helios) played back in simulated time."""

from gpusteward.sensing.replay.load import TraceFormat, load_trace, sniff
from gpusteward.sensing.replay.settings import ReplaySettings
from gpusteward.sensing.replay.source import REF_KEY, ReplayExecutor, ReplaySource, Stop
from gpusteward.sensing.replay.trace import BUSY_PCT, Trace, TraceWorkload

__all__ = [
    "BUSY_PCT",
    "REF_KEY",
    "ReplayExecutor",
    "ReplaySettings",
    "ReplaySource",
    "Stop",
    "Trace",
    "TraceFormat",
    "TraceWorkload",
    "load_trace",
    "sniff",
]
