"""Node and cluster sources (nvml, prometheus, slurm, kubernetes) land here; the simulator lives in sim/."""
