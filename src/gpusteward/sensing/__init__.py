"""Sensing: sources that observe real GPUs and the workloads holding them.

Vendor SDKs are imported here (and in ``execution/``) only, and lazily: the core imports
without any of them installed.
"""
