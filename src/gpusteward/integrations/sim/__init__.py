"""The embedded simulated cluster: the default source, its executor and a clock.

It serves the demo and the tests: workloads with a known ground truth (``Truth``) so
that what the agent did can be scored (``SimCluster.score``).
"""

from gpusteward.integrations.sim.behaviours import Behaviour, Mode, Plan
from gpusteward.integrations.sim.clock import SimClock
from gpusteward.integrations.sim.cluster import DEFAULT_START, SimCluster
from gpusteward.integrations.sim.executor import SimExecutor
from gpusteward.integrations.sim.scenarios import SCENARIOS, Row, Scenario
from gpusteward.integrations.sim.source import SimSource
from gpusteward.integrations.sim.truth import EndHow, Ending, Event, Score, Truth

__all__ = [
    "DEFAULT_START",
    "SCENARIOS",
    "Behaviour",
    "EndHow",
    "Ending",
    "Event",
    "Mode",
    "Plan",
    "Row",
    "Scenario",
    "Score",
    "SimClock",
    "SimCluster",
    "SimExecutor",
    "SimSource",
    "Truth",
]
