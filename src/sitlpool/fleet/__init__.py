"""SITLs across the machines of a Ray cluster, with the guarantees of one machine.

Each node advertises ``sitl`` = the instances of its pool (``sitlpool ray-resources``);
Ray places, the node's leases decide. ``Fleet(address)`` opens ``RemoteSitl`` handles
(a Ray actor per SITL, launching through ``ManagedManager`` on its node), runs batches
with ``map`` (or a ``SlotPool``: one actor per node running a stream of them), and shows
every node's leases with ``status``.

Importing this package does not import Ray: only using a ``Fleet`` does (its names are
loaded on first use, because Ray is an optional dependency and a second of start-up).
"""

from importlib import import_module

_EXPORTS = {
    "Fleet": "fleet",
    "ray_resources": "resources",
    "RemoteSitl": "remote",
    "RemoteLink": "remote",
    "FleetError": "errors",
    "SitlDied": "errors",
    "NoRoom": "errors",
    "ItemFailed": "errors",
    "FlightResult": "logfetch",
    "FleetManager": "testing",
    "manager": "testing",
    "SlotPool": "slots",
    "RaySessions": "serve",
    "ray_sessions": "serve",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'sitlpool.fleet' has no attribute {name!r}")
    return getattr(import_module(f".{mod}", __name__), name)
