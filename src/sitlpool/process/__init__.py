"""Process handles: ``SitlProcess`` and its two kinds, ``ManagedSitl`` and ``UnmanagedSitl``."""

from .base import ProcessManager, SitlProcess, Status
from .managed import KillReport, ManagedManager, ManagedSitl, ReapReport, kill_instance, reap_orphans

__all__ = [
    "KillReport",
    "ManagedManager",
    "ManagedSitl",
    "ProcessManager",
    "ReapReport",
    "SitlProcess",
    "Status",
    "kill_instance",
    "reap_orphans",
]
from .unmanaged import DiscoveredSitl, NameService, SitlManager, UnmanagedManager, UnmanagedSitl, attach, discover

__all__ += ["DiscoveredSitl", "NameService", "SitlManager", "UnmanagedManager", "UnmanagedSitl", "attach", "discover"]
