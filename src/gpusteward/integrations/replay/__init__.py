"""The ``replay`` source: GPU traces (generic long table, Philly, Helios) played back in simulated time."""

from gpusteward.integrations.replay.load import TraceFormat, load_trace, sniff
from gpusteward.integrations.replay.settings import ReplaySettings
from gpusteward.integrations.replay.source import REF_KEY, ReplayExecutor, ReplaySource, Stop
from gpusteward.integrations.replay.trace import BUSY_PCT, Trace, TraceWorkload

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
