"""Notifiers: how owners and admins hear what gpusteward saw and will do."""

from gpusteward.notify.basic import LogNotifier, MemoryNotifier
from gpusteward.notify.templates import notice_for

__all__ = ["LogNotifier", "MemoryNotifier", "notice_for"]
