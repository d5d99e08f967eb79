"""gpusteward: find GPUs that burn money without doing work, and give them back safely."""

__version__ = "0.1.0"
