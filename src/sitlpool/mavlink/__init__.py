"""MAVLink: one link per vehicle on its own thread (pymavlink).

``VehicleLink`` and ``VehicleState`` load pymavlink on first use (~35 ms): the process layer,
which ``sitlpool status``, ``reap`` and ``kill`` import, imports this package for endpoints."""

from .endpoints import parse_endpoint

__all__ = ["VehicleLink", "VehicleState", "parse_endpoint"]


def __getattr__(name: str):
    if name in ("VehicleLink", "VehicleState"):
        from . import link  # pymavlink on first use (see above)

        return getattr(link, name)
    raise AttributeError(name)
