"""Workload classes (defined in ``domain.classes``: policy times its ladders by class too)."""

from gpusteward.domain.classes import CLASS_KEY, CLASSES, WorkloadClass, workload_class

__all__ = ["CLASSES", "CLASS_KEY", "WorkloadClass", "workload_class"]
