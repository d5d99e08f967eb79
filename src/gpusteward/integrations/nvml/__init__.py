"""``source: nvml``: NVML (nvidia-ml-py, imported lazily) behind one choke point, plus /proc attribution."""

from gpusteward.integrations.nvml.choke import Nvml, Result
from gpusteward.integrations.nvml.sampler import GpuReading, NodeSnapshot, NvmlSampler, ProcReading
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import CHECKPOINT_SIGNAL_KEY, NvmlSource

__all__ = [
    "CHECKPOINT_SIGNAL_KEY",
    "GpuReading",
    "NodeSnapshot",
    "Nvml",
    "NvmlSampler",
    "NvmlSource",
    "NvmlSourceSettings",
    "ProcReading",
    "Result",
]
