"""sitlpool: share ArduPilot SITL instances safely on one Linux workstation.

Names are imported lazily so that ``python -m sitlpool.leases`` and the simulator
start fast and without loading what they do not use.
"""

from importlib import import_module

_EXPORTS = {
    "ConfigError": "errors",
    "InstanceBusy": "errors",
    "InstanceError": "errors",
    "LeaseError": "errors",
    "LeaseReleased": "errors",
    "LockDirError": "errors",
    "NoFreeInstance": "errors",
    "PortsBusy": "errors",
    "SitlpoolError": "errors",
    "ProcessError": "errors",
    "KillRefused": "errors",
    "MavlinkError": "errors",
    "ReadOnlyLink": "errors",
    "Ports": "instances",
    "ports": "instances",
    "Holder": "leases",
    "Lease": "leases",
    "LeasePool": "leases",
    "Settings": "config",
    "load_settings": "config",
    "SitlProcess": "process",
    "Status": "process",
    "ManagedSitl": "process",
    "ManagedManager": "process",
    "UnmanagedSitl": "process",
    "UnmanagedManager": "process",
    "discover": "process",
    "reap_orphans": "process",
    "kill_instance": "process",
    "Flight": "flight",
    "CommandRefused": "mavlink.link",
    "OwnerError": "errors",
    "BadLockFile": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'sitlpool' has no attribute {name!r}")
    return getattr(import_module(f".{mod}", __name__), name)
