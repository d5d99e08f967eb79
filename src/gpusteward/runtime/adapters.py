"""What a source name brings to the loop, in a module of its own so that every source's
factory can import it without importing the registry that lists them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpusteward.domain.models import Observation
from gpusteward.domain.ports import Executor, Notifier, Source
from gpusteward.sim import SimCluster


def no_history(start: datetime, end: datetime, step_s: float) -> list[Observation]:
    """For sources that keep no past: the window fills from the first tick on."""
    return []


@dataclass
class Adapters:
    """The source, the executors that act on what it sees, and its history for start-up."""

    source: Source
    executors: Sequence[Executor]
    #: Observations before ``now`` that fill the window at start-up (may be empty).
    history: Callable[[datetime, datetime, float], list[Observation]] = no_history
    #: The simulated cluster behind a ``sim`` source (the demo scores against it).
    cluster: SimCluster | None = None
    #: Adds the source's own channel to the configured notifier (Kubernetes: an Event on the pods).
    wrap_notifier: Callable[[Notifier], Notifier] | None = None
