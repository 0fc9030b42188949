"""Process handles: ``SitlProcess`` and its two kinds, ``ManagedSitl`` (``managed``: we launch
it) and ``UnmanagedSitl`` (``unmanaged``: someone else did); which program is a SITL
(``binaries``); orphan reaping and ``kill_instance`` (``reaping``)."""

from .base import ProcessManager, SitlProcess, Status
from .binaries import is_sitl_process, resolve_binary
from .managed import ManagedManager, ManagedSitl
from .reaping import KillReport, ReapReport, kill_instance, reap_orphans
from .unmanaged import (
    DiscoveredSitl,
    NameService,
    SitlManager,
    UnmanagedManager,
    UnmanagedSitl,
    attach,
    discover,
    is_this_host,
    local_instance_of,
)

__all__ = [
    "DiscoveredSitl",
    "KillReport",
    "ManagedManager",
    "ManagedSitl",
    "NameService",
    "ProcessManager",
    "ReapReport",
    "SitlManager",
    "SitlProcess",
    "Status",
    "UnmanagedManager",
    "UnmanagedSitl",
    "attach",
    "discover",
    "is_sitl_process",
    "is_this_host",
    "kill_instance",
    "local_instance_of",
    "reap_orphans",
    "resolve_binary",
]
