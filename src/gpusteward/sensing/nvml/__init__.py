"""``source: nvml``: NVML (nvidia-ml-py, imported lazily) behind one choke point, plus /proc attribution."""

from gpusteward.sensing.nvml.choke import Nvml, Result
from gpusteward.sensing.nvml.sampler import GpuReading, NodeSnapshot, NvmlSampler, ProcReading
from gpusteward.sensing.nvml.settings import NvmlSourceSettings
from gpusteward.sensing.nvml.source import CHECKPOINT_SIGNAL_KEY, NvmlSource

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
